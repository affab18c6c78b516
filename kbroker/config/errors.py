"""The one error of configuration: a broker, topic or command config that is unknown or does not parse."""


class ConfigError(ValueError):
    """A config key that is unknown or whose value does not parse or fit its bounds."""
