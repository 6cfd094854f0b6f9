"""Cost models: learned predictions of how fast a candidate schedule runs."""

from autosched.costmodel.adapter import SearchCostModel
from autosched.costmodel.base import CostModel
from autosched.costmodel.xgb import XGBCostModel

__all__ = ["CostModel", "SearchCostModel", "XGBCostModel"]
