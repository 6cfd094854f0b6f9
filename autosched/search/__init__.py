"""Search: design spaces and the strategies that pick which candidates to measure next."""

from autosched.search.base import Proposal, SearchStrategy
from autosched.search.evolutionary import EvolutionarySearch

__all__ = ["EvolutionarySearch", "Proposal", "SearchStrategy"]
