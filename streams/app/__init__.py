"""The Faust runtime of distill: codecs, the track and summarize agents, and their wiring.

``create_app(settings)`` (in :mod:`streams.app.factory`) is the composition
root; the handlers it wires (:mod:`streams.app.track`,
:mod:`streams.app.summarize`) hold no Faust code and are unit-tested
without a broker.
"""
