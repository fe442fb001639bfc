"""Renderers only: console, JSON, Markdown. They re-render saved results without re-running."""
