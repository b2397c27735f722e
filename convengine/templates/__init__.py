"""Prompt and EXACT-text rendering (sandboxed) and the template variable catalogue."""

from convengine.templates.render import placeholders, render_prompt, render_text, translate

__all__ = ["placeholders", "render_prompt", "render_text", "translate"]
