"""Cassandra: schema migrations, the projector and the read API. Imports ``schemas`` only."""
