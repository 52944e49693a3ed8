"""``distill ui``: a small server-rendered browser over the read side, the dead letters and the consumers.

Routes (``streams.ui.web``) stay thin: they fetch through ``streams.ui.sources``
and hand plain values to the pure view-model builders of ``streams.ui.views``
and ``streams.ui.textdiff``, which the templates render.
"""
