# Inside the sandbox: sends requests through the egress proxy on one connection and prints, in hex, every
# byte that comes back. Arguments: http, https or tunnel (plain HTTP inside CONNECT), host:port, then the
# requests' paths (with "HEAD " in front for a HEAD request). Each request carries the secret's placeholder in its Authorization header.
import os, socket, ssl, sys

scheme, authority, paths = sys.argv[1], sys.argv[2], sys.argv[3:]
token = os.environ["TOKEN"]
conn = socket.create_connection(("127.0.0.1", 3128), timeout=20)
if scheme == "https":
    conn.sendall(("CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n" % (authority, authority)).encode())
    answer = b""
    while b"\r\n\r\n" not in answer:
        answer += conn.recv(1)
    host = authority.rsplit(":", 1)[0]
    conn = ssl.create_default_context().wrap_socket(conn, server_hostname=host)
    prefix = ""
elif scheme == "tunnel":
    conn.sendall(("CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n" % (authority, authority)).encode())
    prefix = ""
else:
    prefix = "http://" + authority
out = b""
for path in paths:
    method = "GET"
    if path.startswith("HEAD "):
        method, path = "HEAD", path[5:]
    request = "%s %s%s HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\nAccept-Encoding: gzip\r\n\r\n" % (
        method, prefix, path, authority, token)
    try:
        conn.sendall(request.encode())
    except OSError:
        break
try:
    while True:
        data = conn.recv(65536)
        if not data:
            break
        out += data
except OSError as e:
    out += b"\n[fetch: " + str(e).encode() + b"]"
print(out.hex())
