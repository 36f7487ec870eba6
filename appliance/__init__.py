"""appliance: a Kafka-compatible commit log as a multiprocess shared-memory appliance."""

__version__ = "0.1.0"
