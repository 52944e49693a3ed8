"""Thin clients of the outside world, opened at startup: Kafka (client arguments, topic and group
administration), Cassandra (opening a session), the embeddings API, and the recall tools' reader."""
