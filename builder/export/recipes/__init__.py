"""The export recipe of each family (see base.py for what a recipe holds). Adding a family: its model file
under builder/families, its recipe here, and one line in FAMILIES and in RECIPES."""

from onnxformer.builder.export.recipes import bert, gpt, t5
from onnxformer.builder.export.recipes.base import Recipe
from onnxformer.runtime.errors import ExportError
from onnxformer.runtime.manifest import Manifest

RECIPES: dict[str, Recipe] = {
    "gpt": gpt.RECIPE,
    "bert": bert.RECIPE,
    "t5": t5.RECIPE,
}


def recipe(family: str) -> Recipe:
    if family not in RECIPES:
        raise ExportError(f"no export recipe for family {family!r}; known: {sorted(RECIPES)}")
    return RECIPES[family]


def recipe_for(manifest: Manifest) -> Recipe:
    """The recipe a model export was made with. The manifest's `family` is informational (the runtime
    goes by `task`); this is the one place the builder reads it back, as the key the recipe wrote, and it
    checks that the recipe exports the manifest's task."""
    found = recipe(str(manifest.family))
    if found.task != manifest.task:
        raise ExportError(
            f"the export's manifest names family {manifest.family!r} with task {manifest.task!r}, but that "
            f"family exports task {found.task!r}; export the model again with this version of onnxformer"
        )
    return found


__all__ = ["RECIPES", "Recipe", "recipe", "recipe_for"]
