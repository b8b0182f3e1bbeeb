# An upstream that reflects each request it receives: the request line, headers and body come back in the
# response body, and the Authorization header's value, as received, comes back in response headers and in
# the encodings a server would naturally produce (base64, percent-encoding, JSON). The path picks the
# framing. Arguments: a directory holding server.pem and server.key for HTTPS, or "-" for plain HTTP.
import base64, gzip, json, socket, ssl, sys, threading, urllib.parse

def read_request(conn):
    data = b""
    while b"\r\n\r\n" not in data:
        more = conn.recv(65536)
        if not more:
            return None
        data += more
    head, _, rest = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    length = int(headers.get("content-length", "0"))
    while len(rest) < length:
        rest += conn.recv(65536)
    return lines[0], headers, head + b"\r\n\r\n" + rest[:length]

def reflection(headers, raw):
    auth = headers.get("authorization", "")
    token = auth.split(" ", 1)[1] if " " in auth else auth
    tb = token.encode("latin-1")
    body = b"raw request:\n" + raw + b"\n"
    body += json.dumps({"headers": {"Authorization": auth}, "url": "/anything?t=" + token}).encode() + b"\n"
    body += b"b64: " + base64.b64encode(tb) + b"\n"
    body += b"basic: Basic " + base64.b64encode(b"user:" + tb) + b"\n"
    body += b"basic2: Basic " + base64.b64encode(b"me:" + tb) + b"\n"
    body += b"basic3: Basic " + base64.b64encode(b"x:" + tb) + b"\n"
    body += b"urlsafe: " + base64.urlsafe_b64encode(tb).rstrip(b"=") + b"\n"
    body += b"percent: " + urllib.parse.quote(token, safe="").encode() + b"\n"
    body += b"form: " + urllib.parse.urlencode({"t": token}).encode() + b"\n"
    extra = [
        "X-Echo-Authorization: " + auth,
        "Set-Cookie: t=" + urllib.parse.quote(token) + "; Path=/",
        "Location: /back?t=" + urllib.parse.quote(token, safe=""),
        'WWW-Authenticate: Bearer realm="' + token.replace('"', '\\"') + '"',
    ]
    return token, body, "".join(h + "\r\n" for h in extra)

def serve(conn):
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    got = read_request(conn)
    if got is None:
        return
    line, headers, raw = got
    method, path = line.split(" ")[0], line.split(" ")[1]
    token, body, extra = reflection(headers, raw)
    reason = "OK " + token
    if path.startswith("/chunked"):
        conn.sendall(("HTTP/1.1 200 " + reason + "\r\nTransfer-Encoding: chunked\r\nTrailer: X-Echo\r\n" + extra + "\r\n").encode("latin-1"))
        for i in range(0, len(body), 5):
            piece = body[i:i + 5]
            conn.sendall(b"%x\r\n%s\r\n" % (len(piece), piece))
        conn.sendall(("0\r\nX-Echo: " + token + "\r\n\r\n").encode("latin-1"))
    elif path.startswith("/gzip"):
        compress = "gzip" in headers.get("accept-encoding", "") or path.startswith("/gzip-always")
        if compress:
            body = gzip.compress(body)
        coding = "Content-Encoding: gzip\r\n" if compress else ""
        conn.sendall(("HTTP/1.1 200 OK\r\nContent-Length: %d\r\n%s%s\r\n" % (len(body), coding, extra)).encode("latin-1") + body)
    elif path.startswith("/upgrade"):
        conn.sendall(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n" + token.encode("latin-1"))
    elif path.startswith("/length-echo"):
        # The value as the response's Content-Length, as an endpoint that sets headers from the query does.
        conn.sendall(("HTTP/1.1 200 OK\r\nContent-Length: " + token + "\r\n\r\n").encode("latin-1"))
    elif path.startswith("/twice"):
        # A second response on the same connection, as if the proxy had asked for keep-alive.
        first = b"first"
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(first), first))
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
        more = read_request(conn)
        if more is not None:
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(more[2]), more[2]))
    else:
        length = 0 if method == "HEAD" else len(body)
        conn.sendall(("HTTP/1.1 200 " + reason + "\r\nContent-Length: %d\r\n%s\r\n" % (len(body), extra)).encode("latin-1"))
        if method != "HEAD":
            conn.sendall(body[:length])

def main():
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    ctx = None
    if sys.argv[1] != "-":
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(sys.argv[1] + "/server.pem", sys.argv[1] + "/server.key")
    print(listener.getsockname()[1], flush=True)
    while True:
        conn, _ = listener.accept()
        def run(conn=conn):
            try:
                if ctx is not None:
                    conn = ctx.wrap_socket(conn, server_side=True)
                serve(conn)
            except Exception as e:
                print("echo:", e, file=sys.stderr, flush=True)
            finally:
                conn.close()
        threading.Thread(target=run, daemon=True).start()

main()
