"""Pure rules: no Kafka, Cassandra, Faust or OpenAI imports in this package."""
