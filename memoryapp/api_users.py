"""Agent API routes about one end user: portal links, export, erasure."""

from ninja import Router

router = Router(tags=["users"])
