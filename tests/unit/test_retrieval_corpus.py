"""Which documents the retrieval index holds: stable when apt's package lists change."""

import pytest

from hotpath.errors import BuildError
from hotpath.exporters.retrieval_corpus import Document, parse_packages
from hotpath.exporters.retrieval_index import split_corpus


def _docs(names):
    return [Document(n, f"{n}: a package.") for n in names]


def test_membership_does_not_shift_when_packages_are_added():
    names = [f"pkg{i:05d}" for i in range(4000)]
    before, _ = split_corpus(_docs(names), 500, 50)
    after, _ = split_corpus(_docs(names + [f"new{i}" for i in range(300)]), 500, 50)
    kept = {d.id for d in before} & {d.id for d in after}
    # An even spread over sorted names would keep ~1/8 of them; a hash order keeps all but the few
    # pushed past the limit by new packages ranked before them.
    assert len(kept) >= 0.85 * len(before)


def test_included_packages_are_indexed_and_queries_are_held_out():
    names = [f"pkg{i:05d}" for i in range(3000)] + ["gzip", "wget"]
    indexed, held = split_corpus(_docs(names), 400, 60, include=("gzip", "wget"))
    ids = [d.id for d in indexed]
    assert len(indexed) == 400 and {"gzip", "wget"} <= set(ids) and ids == sorted(ids)
    assert len(held) == 60 and not {d.id for d in held} & set(ids)


def test_a_missing_included_package_fails_the_build():
    with pytest.raises(BuildError, match="nosuchpkg"):
        split_corpus(_docs(["a", "b", "c"]), 2, 1, include=("nosuchpkg",))


def test_without_limit_everything_but_the_queries_is_indexed():
    indexed, held = split_corpus(_docs([f"p{i}" for i in range(100)]), 0, 10)
    assert len(indexed) == 90 and len(held) == 10


def test_stanzas_parse_into_name_synopsis_and_description():
    text = ("Package: gzip\nVersion: 1.12\nDescription: GNU compression utilities\n This package provides\n .\n"
            " the standard GNU file compression utilities.\n\nPackage: gzip\nDescription: duplicate\n")
    (doc,) = parse_packages(text, 300)
    assert doc.id == "gzip"
    assert doc.text == "gzip: GNU compression utilities. This package provides the standard GNU file compression utilities."
