"""The web console of `--http-port`: a read-only page over a JSON API (api.py), served
by the standard library's HTTP server (web.py), with the lag history it charts
(lag_history.py); console.py starts and stops them together."""
