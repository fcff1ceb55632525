"""The Song-lyrics demo's prompts: the composer's and reviewer's system messages and the request.

The texts are the article's, verbatim (see `loop_agents_cli.demos.prompts`, where they live);
this module lets programs next to it, such as the article's own, ``from prompts import ...``.
"""

from loop_agents_cli.demos.prompts import composer_system_message, prompt, reviewer_system_message

__all__ = ["composer_system_message", "prompt", "reviewer_system_message"]
