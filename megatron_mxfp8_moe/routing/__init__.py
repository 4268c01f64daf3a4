"""Routing: packed routing words, global -> local expert ids, and the graph-stable row policy."""
