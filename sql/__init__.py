"""TDengine-style SQL on sqlglot: the dialect, typed statements, the catalog model and
the topic compiler. Imports nothing of ours but `sqltopic.errors`."""
