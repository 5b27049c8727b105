"""A BERT WordPiece tokenizer as an ONNX graph (onnxruntime-extensions' BertTokenizer op).

The op tokenizes one text (two are read as a sentence pair), so the graph loops over the batch:
each text is tokenized, truncated at `max_length` by the op, and padded to `max_length`; the batch
is then cut to its longest row. Outputs match HF `tokenizers` with padding to the batch's longest
(token ids equal on the parity texts except where the two disagree on Unicode accent stripping,
which the exporter's parity check reports).

    TEXT string [batch, 1] -> input_ids, attention_mask, token_type_ids int64 [batch, longest]
"""

from __future__ import annotations

from pathlib import Path

CONTRIB_DOMAIN = "ai.onnx.contrib"
OUTPUTS = ("input_ids", "attention_mask", "token_type_ids")


def bert_tokenizer_graph(vocab_file: Path, max_length: int, input_name: str = "TEXT", opset: int = 17,
                         do_lower_case: bool = True):
    """The tokenizer as an onnx.ModelProto (needs the onnxruntime-extensions op library to run)."""
    from onnx import TensorProto as T
    from onnx import helper as h

    def ints(name, values):
        return h.make_tensor(name, T.INT64, [len(values)], values)

    body = h.make_graph(
        [
            h.make_node("Unsqueeze", ["i", "axis0"], ["index"]),
            h.make_node("Gather", ["texts", "index"], ["text"], axis=0),
            h.make_node("BertTokenizer", ["text"], ["ids", "types", "mask", "offsets"], domain=CONTRIB_DOMAIN,
                        vocab_file=Path(vocab_file).read_bytes(), do_lower_case=int(do_lower_case),
                        strip_accents=1, max_length=max_length),
            h.make_node("Shape", ["ids"], ["length"]),
            h.make_node("Sub", ["max_length", "length"], ["missing"]),
            h.make_node("Concat", ["zero", "missing"], ["pads"], axis=0),
            h.make_node("Pad", ["ids", "pads"], ["ids_padded"]),
            h.make_node("Pad", ["types", "pads"], ["types_padded"]),
            h.make_node("Pad", ["mask", "pads"], ["mask_padded"]),
            h.make_node("Identity", ["cond_in"], ["cond_out"]),
        ],
        "tokenize_one",
        [h.make_tensor_value_info("i", T.INT64, []), h.make_tensor_value_info("cond_in", T.BOOL, [])],
        [h.make_tensor_value_info("cond_out", T.BOOL, []),
         *(h.make_tensor_value_info(n, T.INT64, [max_length])
           for n in ("ids_padded", "types_padded", "mask_padded"))],
        initializer=[ints("axis0", [0]), ints("max_length", [max_length]), ints("zero", [0])],
    )
    graph = h.make_graph(
        [
            h.make_node("Reshape", [input_name, "flat"], ["texts"]),
            h.make_node("Shape", ["texts"], ["batch1"]),
            h.make_node("Squeeze", ["batch1", "axis0"], ["batch"]),
            h.make_node("Loop", ["batch", "true"], ["all_ids", "all_types", "all_mask"], body=body),
            h.make_node("ReduceSum", ["all_mask", "axis1"], ["lengths"], keepdims=0),
            h.make_node("ReduceMax", ["lengths"], ["longest"], keepdims=1),
            h.make_node("Slice", ["all_ids", "zero", "longest", "axis1"], ["input_ids"]),
            h.make_node("Slice", ["all_mask", "zero", "longest", "axis1"], ["attention_mask"]),
            h.make_node("Slice", ["all_types", "zero", "longest", "axis1"], ["token_type_ids"]),
        ],
        "bert_tokenizer",
        [h.make_tensor_value_info(input_name, T.STRING, ["batch", 1])],
        [h.make_tensor_value_info(n, T.INT64, ["batch", "sequence"]) for n in OUTPUTS],
        initializer=[ints("flat", [-1]), ints("axis0", [0]), ints("axis1", [1]), ints("zero", [0]),
                     h.make_tensor("true", T.BOOL, [], [True])],
    )
    return h.make_model(graph, opset_imports=[h.make_opsetid("", opset), h.make_opsetid(CONTRIB_DOMAIN, 1)])


def extensions_library() -> str:
    """Path of the onnxruntime-extensions custom-op library of this Python environment."""
    from onnxruntime_extensions import get_library_path

    return get_library_path()
