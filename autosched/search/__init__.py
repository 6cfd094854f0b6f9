"""Search: design spaces and the strategies that pick which candidates to measure next."""

from autosched.search.base import Proposal, SearchStrategy
from autosched.search.evolutionary import EvolutionarySearch, population_for
from autosched.search.space import DesignSpace, design_space

__all__ = [
    "DesignSpace",
    "EvolutionarySearch",
    "Proposal",
    "SearchStrategy",
    "design_space",
    "population_for",
]
