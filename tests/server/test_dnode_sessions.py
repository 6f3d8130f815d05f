"""Logins on a dnode (server/mnode/auth.py with no root password of its own): root's
password is the mnode's, learnt from its heartbeat answers; other users' come with the
catalog."""

from __future__ import annotations

import pytest

from sqltopic.errors import AuthenticationFailed, ServerUnavailable
from sqltopic.server.mnode.auth import Sessions
from sqltopic.server.mnode.passwords import hash_password, new_salt
from sqltopic.sql.model import User


def test_root_logs_in_on_a_dnode_with_the_password_the_mnode_holds() -> None:
    mnode = Sessions("mnode-root-pw")
    dnode = Sessions(None)
    with pytest.raises(ServerUnavailable, match="not heard from its mnode"):
        dnode.login("root", "mnode-root-pw")
    dnode.set_root(*mnode.root_record())
    token, session = dnode.login("root", "mnode-root-pw")
    assert session.user == "root"
    assert dnode.named(token).user == "root"
    with pytest.raises(AuthenticationFailed):
        dnode.login("root", "taosdata")
    dnode.set_root(*mnode.root_record())  # the same again: sessions stay
    assert dnode.named(token).user == "root"
    other = Sessions("another-root-pw")  # the mnode restarted with another password
    dnode.set_root(*other.root_record())
    with pytest.raises(AuthenticationFailed):
        dnode.named(token)  # root's sessions ended
    assert dnode.login("root", "another-root-pw")[1].user == "root"


def test_other_users_log_in_on_a_dnode_with_the_catalog_s_hashes() -> None:
    salt = new_salt()
    alice = User("alice", hash_password("alice-pw-1", salt), salt, False, 0)
    dnode = Sessions(None, {"alice": alice}.get)
    assert dnode.login("alice", "alice-pw-1")[1].user == "alice"
    with pytest.raises(AuthenticationFailed):
        dnode.login("alice", "wrong-pw-1")
