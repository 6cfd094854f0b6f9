"""Search: design spaces and the strategies that pick which candidates to measure next."""

from autosched.search.base import Proposal, SearchStrategy
from autosched.search.evolutionary import EvolutionarySearch, population_for

__all__ = ["EvolutionarySearch", "Proposal", "SearchStrategy", "population_for"]
