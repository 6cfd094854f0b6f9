"""The tuning service's central side: the REST API and the search engine."""
