"""Framework adapters: distill as the session store of agent frameworks.

- :mod:`streams.adapters.backend` — the framework-neutral facade both adapters use
  (publish events, read the view the next request needs, summarize, recall tools);
- :mod:`streams.adapters.trpc_session` — a ``BaseSessionService`` of trpc-agent-py
  (the ``trpc`` extra: ``pip install 'distill[trpc]'``);
- :mod:`streams.adapters.openai_agents_session` — a ``Session`` of the OpenAI Agents SDK
  (the ``agents`` extra: ``pip install 'distill[agents]'``).

Importing this package (or the backend) never imports a framework: only the
framework's own adapter module does, so distill runs without either extra.
"""
