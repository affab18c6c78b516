"""Connections from this broker to another: ``client.BrokerConnection`` (one request at a time, the inter-broker
listener's security). Replica fetchers, the controller's channel, controlled shutdown and the transaction
coordinator's markers use it; it knows only the protocol, so every layer above it may."""
