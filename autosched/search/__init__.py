"""Search: design spaces and the strategies that pick which candidates to measure next."""

from autosched.search.base import Proposal, SearchStrategy
from autosched.search.evolutionary import EvolutionarySearch, population_for
from autosched.search.random import RandomSearch
from autosched.search.space import DesignSpace, design_space
from autosched.search.tpe import TPESearch

__all__ = [
    "DesignSpace",
    "EvolutionarySearch",
    "Proposal",
    "RandomSearch",
    "SearchStrategy",
    "TPESearch",
    "design_space",
    "population_for",
]
