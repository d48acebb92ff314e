"""The MQTT edge: the client supervisor (one aiomqtt session kept alive,
failing over between brokers), its connection state as plain data, the batched
QoS 0 publisher, and the embedded broker ``rainierd run`` starts.  Only
``_paho`` touches aiomqtt's and paho's internals.
"""
