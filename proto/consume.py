"""What both ends of a `Vnode.Consume` stream agree on beyond the .proto: the header by
which a server announces that requests may carry `more`, and how many they may carry
(docs/protocol.md, "Consume")."""

from __future__ import annotations

# The stream's initial metadata has this key when the server takes requests in `more`
# (an older server would ignore the field, and the requests in it).
MORE_HEADER = "sqltopic-consume-more"
# Requests one message may carry in `more`: a process's consumers' commits or polls
# ready together; a bound on the work one message can start.
MAX_MORE_REQUESTS = 1_024
# Grants one message may carry over all its requests: a client process's follows
# granting together (40,000 follows, four grants each, is 160,000); a bound on the work
# one message makes the server do before anything else.
MAX_GRANTS = 262_144
