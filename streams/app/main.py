"""The module-level app for ``faust -A streams.app.main`` (the only import-time wiring).

``distill worker`` does not use it: it builds its own app with ``create_app``.
"""

from __future__ import annotations

from schemas.settings import load_settings
from streams.app.factory import create_app

app = create_app(load_settings())
