"""The plans layer of hotpath.tensorrt: specs -> recipes, plan configs and plans, for `hotpath build`.

Calls down into the core (hotpath.tensorrt: recipe, manifest, compat, inventory, builder, parity), never
the other way; entered only for a spec with a `[hotpath.tensorrt]` table (hotpath.repository_build).
"""
