"""Local Kafka and Cassandra as JVM processes built from Maven Central jars (no Docker)."""
