"""The export recipe of each family (see base.py for what a recipe holds). Adding a family: its model file
under builder/families, its recipe here, and one line in FAMILIES and in RECIPES."""

from onnxformer.builder.export.recipes import bert, gpt, t5
from onnxformer.builder.export.recipes.base import Recipe
from onnxformer.runtime.errors import ExportError

RECIPES: dict[str, Recipe] = {
    "gpt": gpt.RECIPE,
    "bert": bert.RECIPE,
    "t5": t5.RECIPE,
}


def recipe(family: str) -> Recipe:
    if family not in RECIPES:
        raise ExportError(f"no export recipe for family {family!r}; known: {sorted(RECIPES)}")
    return RECIPES[family]


__all__ = ["RECIPES", "Recipe", "recipe"]
