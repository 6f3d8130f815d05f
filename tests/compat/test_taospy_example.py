"""TDengine's documented Python subscription example, run on sqltopic with its imports
changed: the code between the two `----- vendored` lines is
https://github.com/taosdata/TDengine/blob/584d253169058af279cb4ecd459280b50e09b1c0/docs/examples/python/tmq_native.py
(the taospy code that TDengine's developer guide "Manage Consumers",
/developer-guide/manage-consumers, shows under "Native Connection" with
`{{#include docs/examples/python/tmq_native.py:...}}`), unchanged except:

* `import taos` -> `import sqltopic.taos as taos` (the example's SQL goes through
  `taos.connect`, `execute`, `select_db` and `close`, which sqltopic.taos offers too);
* `from taos.tmq import Consumer` -> `from sqltopic.taos import Consumer`;
* `range(50)` -> `range(POLLS)` in its two poll loops: 50 polls of 1 s each would keep
  the suite waiting 100 s on polls that find nothing;
* its `__main__` block is the body of `example_main()`, so that the test runs it.

The test points `host` and `port` at the test server, runs the example and checks what
it printed: no failure, no row before the seek (auto.offset.reset is latest and the rows
were written before), then, after `seek` to offset 0, every row once and a commit of
each message.
"""

# The vendored code keeps its own style (spacing, long lines, semicolons):
# ruff: noqa: E501, W291, E703, E402, B007, F541, PLR0402, I001
# mypy: allow-untyped-defs, allow-untyped-calls

from __future__ import annotations

import re
import sys

import pytest

from tests.live_server import ServerProcess

POLLS = 4

# ----- vendored from TDengine docs/examples/python/tmq_native.py@584d2531 -----
# fmt: off
#!/usr/bin/python3
import sqltopic.taos as taos  # was: import taos

db              = "power"
topic           = "topic_meters"
user            = "root"
password        = "taosdata"
host            = "localhost"
port            = 6030
groupId         = "group1"
clientId        = "1"  
tdConnWsScheme  = "ws"
autoOffsetReset = "latest"
autoCommitState = "true"
autoCommitIntv  = "1000"


def prepareMeta():
    conn = None
    try:
        conn = taos.connect(host=host, user=user, password=password, port=port)
        conn.execute(f"CREATE DATABASE IF NOT EXISTS {db}")

        # change database. same as execute "USE db"
        conn.select_db(db)

        # create super table
        conn.execute(
            "CREATE STABLE IF NOT EXISTS power.meters (ts TIMESTAMP, current FLOAT, voltage INT, phase FLOAT) TAGS (location BINARY(64), groupId INT)"
        )

        # ANCHOR: create_topic
        # create topic
        conn.execute(
            f"CREATE TOPIC IF NOT EXISTS {topic} AS SELECT ts, current, voltage, phase, groupid, location FROM meters"
        )
        # ANCHOR_END: create_topic
        sql = """
            INSERT INTO 
            power.d1001 USING power.meters (groupid, location) TAGS(2, 'California.SanFrancisco')
                VALUES (NOW + 1a, 10.30000, 219, 0.31000) 
                (NOW + 2a, 12.60000, 218, 0.33000) (NOW + 3a, 12.30000, 221, 0.31000)
            power.d1002 USING power.meters (groupid, location) TAGS(3, 'California.SanFrancisco') 
                VALUES (NOW + 1a, 10.30000, 218, 0.25000)
            """
        affectedRows = conn.execute(sql)
        print(f"Inserted into {affectedRows} rows to power.meters successfully.")
    except Exception as err:
        print(f"Failed to prepareMeta, host: {host}:{port}, db: {db}, topic: {topic}, ErrMessage:{err}.")
        raise err
    finally:
        if conn:
            conn.close()

# ANCHOR: create_consumer
from sqltopic.taos import Consumer  # was: from taos.tmq import Consumer

def create_consumer():
    try:
        consumer = Consumer(
            {
                "group.id": groupId,
                "client.id": clientId,
                "td.connect.user": user,
                "td.connect.pass": password,
                "enable.auto.commit": autoCommitState,
                "auto.commit.interval.ms": autoCommitIntv,
                "auto.offset.reset": autoOffsetReset,
                "td.connect.ip": host,
                "td.connect.port": str(port),
            }
        )
        print(f"Create consumer successfully, host: {host}:{port}, groupId: {groupId}, clientId: {clientId}")
        return consumer
    except Exception as err:
        print(f"Failed to create native consumer, host: {host}:{port}, groupId: {groupId}, clientId: {clientId}, ErrMessage:{err}.")
        raise err
    # ANCHOR_END: create_consumer


# ANCHOR: subscribe
def subscribe(consumer):
    try:
        # subscribe to the topics
        consumer.subscribe(["topic_meters"])
        print("Subscribe topics successfully")
        for i in range(POLLS):  # was: range(50)
            records = consumer.poll(1)
            if records:
                err = records.error()
                if err is not None:
                    print(f"Poll data error, {err}")
                    raise err

                val = records.value()
                if val:
                    for block in val:
                        data = block.fetchall()
                        print(f"data: {data}")

    except Exception as err:
        print(f"Failed to poll data, topic: {topic}, groupId: {groupId}, clientId: {clientId}, ErrMessage:{err}.")
        raise err


# ANCHOR_END: subscribe

def commit_offset(consumer):
    # ANCHOR: commit_offset
    try:
        for i in range(POLLS):  # was: range(50)
            records = consumer.poll(1)
            if records:
                err = records.error()
                if err is not None:
                    print(f"Poll data error, {err}")
                    raise err

                val = records.value()
                if val:
                    for block in val:
                        print(block.fetchall())

                # after processing the data, commit the offset manually
                consumer.commit(records)
                print("Commit offset manually successfully.");

    except Exception as err:
        print(f"Failed to commit offset, topic: {topic}, groupId: {groupId}, clientId: {clientId}, ErrMessage:{err}.")
        raise err
    # ANCHOR_END: commit_offset


def seek_offset(consumer):
    # ANCHOR: assignment
    try:
        assignments = consumer.assignment()
        if assignments:
            for partition in assignments:
                partition.offset = 0
                consumer.seek(partition)
                print(f"Assignment seek to beginning successfully.")
    except Exception as err:
        print(f"Failed to seek offset, topic: {topic}, groupId: {groupId}, clientId: {clientId}, ErrMessage:{err}.")
        raise err
    # ANCHOR_END: assignment

def unsubscribe(consumer):
    # ANCHOR: unsubscribe    
    try:
        consumer.unsubscribe()
        print("Consumer unsubscribed successfully.");
    except Exception as err:
        print(f"Failed to unsubscribe consumer. topic: {topic}, groupId: {groupId}, clientId: {clientId}, ErrMessage:{err}.")
    finally:
        if consumer:
            consumer.close()
            print("Consumer closed successfully.");        
    # ANCHOR_END: unsubscribe

def example_main():  # was: if __name__ == "__main__":
    consumer = None
    try:
        prepareMeta()
        consumer = create_consumer()
        subscribe(consumer)
        seek_offset(consumer)
        commit_offset(consumer)
    except Exception as err:
        print(f"Failed to execute consumer example, topic: {topic}, groupId: {groupId}, clientId: {clientId}, ErrMessage:{err}.")
    finally:
        unsubscribe(consumer);
# fmt: on
# ----- vendored end -----


def test_the_documented_taospy_example_runs_on_sqltopic(
    server: ServerProcess, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys.modules[__name__], "port", server.port)
    example_main()
    out = capsys.readouterr().out
    assert "Failed" not in out, out
    assert "Inserted into 4 rows to power.meters successfully." in out
    assert "data: " not in out  # latest: the rows were written before the subscription
    assert out.count("Assignment seek to beginning successfully.") == 2  # two vgroups
    # rows print as (datetime(...), current, voltage, phase, groupid, location); FLOAT is
    # a float32 (10.300000190734863), as taospy's
    row = r"\(datetime\.datetime\([^)]*\), ([\d.]+), (\d+), ([\d.]+), (\d), '([^']*)'\)"
    rows = re.findall(row, out)
    assert sorted((round(float(c), 4), int(v), g) for c, v, _, g, _ in rows) == [
        (10.3, 218, "3"), (10.3, 219, "2"), (12.3, 221, "2"), (12.6, 218, "2"),
    ]  # fmt: skip
    messages = out.count("Commit offset manually successfully.")
    assert 1 <= messages <= 2  # a message per vgroup with rows, each committed
    assert "Consumer unsubscribed successfully." in out
    assert "Consumer closed successfully." in out
