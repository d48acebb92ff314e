"""End-to-end tests: a whole deployment (simulator, broker, monitor, Prometheus or Alertmanager) and what
an operator would see; every one is in the integration tier."""
