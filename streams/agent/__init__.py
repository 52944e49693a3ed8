"""The agent facade: publish what the model and the tools produced, get the next request, run the recall tools.

See :mod:`streams.agent.facade`. Settings: ``Settings.agent``
(:class:`schemas.settings.AgentSettings`, the Go guide's llmagent options).
"""

from schemas.settings import AgentSettings
from streams.agent.facade import AgentRequest, DistillAgent, ProjectionBehindError
from streams.agent.messages import InvalidMessageError, to_message
from streams.agent.tools import LocalTool

__all__ = [
    "AgentRequest",
    "AgentSettings",
    "DistillAgent",
    "InvalidMessageError",
    "LocalTool",
    "ProjectionBehindError",
    "to_message",
]
