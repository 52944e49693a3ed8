"""distill's stream side: rules, summarizer, context assembly, Faust app, client and CLI."""
