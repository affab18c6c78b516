"""Admin command-line tools (``kbroker topics``, ``kbroker groups``) and the small synchronous
client they share, speaking the Kafka protocol through kbroker's own codec."""
