"""An HTTP/2 (h2c, prior knowledge) client on python-h2 that sends a POST with a body and,
when asked, request trailers; prints the response's headers, body and trailers as JSON.

usage: h2_trailers_client.py HOST PORT PATH BODY [TRAILER=VALUE ...]
"""

import json
import socket
import sys

import h2.config
import h2.connection
import h2.events


def main():
    host, port, path, body = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
    trailers = [tuple(t.split("=", 1)) for t in sys.argv[5:]]
    sock = socket.create_connection((host, port), timeout=10)
    conn = h2.connection.H2Connection(
        h2.config.H2Configuration(client_side=True, header_encoding="utf-8")
    )
    conn.initiate_connection()
    stream = conn.get_next_available_stream_id()
    conn.send_headers(
        stream,
        [(":method", "POST"), (":path", path), (":authority", "lua.test"), (":scheme", "http")],
    )
    conn.send_data(stream, body.encode(), end_stream=not trailers)
    if trailers:
        conn.send_headers(stream, trailers, end_stream=True)
    sock.sendall(conn.data_to_send())
    out = {"headers": None, "body": "", "trailers": None, "reset": None}
    done = False
    while not done:
        data = sock.recv(65535)
        if not data:
            break
        for event in conn.receive_data(data):
            if isinstance(event, h2.events.ResponseReceived):
                out["headers"] = dict(event.headers)
            elif isinstance(event, h2.events.DataReceived):
                out["body"] += event.data.decode()
                conn.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
            elif isinstance(event, h2.events.TrailersReceived):
                out["trailers"] = dict(event.headers)
            elif isinstance(event, h2.events.StreamReset):
                out["reset"] = event.error_code
                done = True
            elif isinstance(event, h2.events.StreamEnded):
                done = True
        sock.sendall(conn.data_to_send())
    print(json.dumps(out))


main()
