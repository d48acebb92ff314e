"""Specification of the HTTP client's response parser (http/client.py) against whatever a server may send (issue
35): a response that is not HTTP/1.x as RFC 9112 frames it is an ``HttpError``, never another exception (the
ValueErrors of ``Content-Length: ²``, a chunk size of ``-1`` or a status of ``²²²`` ended the monitor through its
webhook sink); a well-formed one parses to its status, fields and body; and no answer makes the parser read past
its bounds.  The parser is fed over a real ``asyncio.StreamReader``, as ``request`` feeds it from a socket.
And ``parse_url`` refuses a URL no request could carry, where each request would have raised."""

from __future__ import annotations

import asyncio
import base64
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rainierd.http.client import (
    _MAX_HEAD_BYTES,
    HttpError,
    Response,
    _framing_budget,
    _response,
    basic_authorization,
    parse_url,
)

MAX_BODY = 64  # small, so the body bound is met by examples hypothesis makes
# Bytes after every structured answer: a parser that reads past its bounds (to the close, say) is seen doing so.
TAIL = b"Z" * (3 * _MAX_HEAD_BYTES)


def bound(max_body_bytes: int) -> int:
    """Return the most a response may take from the stream: its heads (the last head read may overrun the budget
    by one reader limit before it is refused), its body (one byte more when it ends at the close) and its chunk
    framing."""
    return 2 * (_MAX_HEAD_BYTES + 4) + max_body_bytes + 1 + _framing_budget(max_body_bytes)


async def parse(raw: bytes, *, max_body_bytes: int = MAX_BODY, head_only: bool = False) -> tuple[Response | HttpError,
                                                                                                int]:
    """Return what ``_response`` made of ``raw`` (a Response or the HttpError it raised) and how many bytes it
    took; any other exception propagates and fails the test."""
    reader = asyncio.StreamReader(limit=_MAX_HEAD_BYTES)  # as request() opens its connection
    reader.feed_data(raw)
    reader.feed_eof()
    try:
        outcome: Response | HttpError = await _response(reader, max_body_bytes=max_body_bytes, head_only=head_only)
    except HttpError as exc:
        outcome = exc
    return outcome, len(raw) - len(await reader.read())


def check(outcome: Response | HttpError, taken: int, max_body_bytes: int = MAX_BODY) -> None:
    assert isinstance(outcome, Response | HttpError)
    assert taken <= bound(max_body_bytes)
    if isinstance(outcome, Response):
        assert 100 <= outcome.status <= 599
        assert len(outcome.body) <= max_body_bytes


# Pieces of answers near the valid ones: what a confused, broken or hostile server sends.
VERSIONS = st.sampled_from([b"HTTP/1.1", b"HTTP/1.0", b"HTTP/2", b"HTTP/1.x", b"http/1.1", b"HTTP/1.1 ", b""])
CODES = st.one_of(st.sampled_from([
    b"200", b"204", b"304", b"100", b"101", b"103", b"500", b"999", b"099", b"2000", b"20", b"\xb2\xb2\xb2",
    "٢٠٠".encode(), b"+20", b" 200", b"2_0"]), st.binary(max_size=4))
REASONS = st.one_of(st.sampled_from([b"", b" OK", b" \xe9t\xe9", b" A" * 6_000, b" \x00", b"\r"]),
                    st.binary(max_size=12).map(lambda b: b" " + b))
NAMES = st.one_of(st.sampled_from([
    b"Content-Length", b"content-length", b"Transfer-Encoding", b"transfer-encoding", b"Content-Length ",
    b" Content-Length", b"X-A", b"", "見出し".encode(), b"\xff\xfe"]), st.binary(max_size=6))
VALUES = st.one_of(st.sampled_from([
    b"0", b"5", b"64", b"65", b"-1", b"-5", b"+5", b"\xb2", "\u0665".encode(), b"0x10", b"1_0", b" 5 ", b"5, 6",
    b"5, 5", b"5,", b"99999999999999999999999", b"1" * 5_000, b"chunked", b"Chunked", b"gzip, chunked",
    b"chunked, chunked", b"chunked;q=1", b"identity", b"", b"a\x00b", "値".encode()]), st.binary(max_size=8))
LENGTHS = st.sampled_from([b"0", b"5", b"64", b"65", b"-1", b"+5", b"\xb2", b"\xb9", "\u0665".encode(), b"1_0",
                           b"5, 6", b"5, 5", b"1" * 5_000, b"99999999999999999999999"])
FIELDS = st.lists(st.one_of(st.tuples(NAMES, VALUES).map(lambda nv: nv[0] + b": " + nv[1]),
                            st.sampled_from([b" folded", b"\tfolded", b"no colon", b"X-B:\x7f"])), max_size=2)
SIZES = st.one_of(st.sampled_from([
    b"-1", b"+5", b"0x5", b"5_0", b"\xb2", b" 5", b"5 ", b"", b"ffffffffffffffffffff", b"FFFFFFFFFFFFFFFF",
    b"0" * 17 + b"1", b"1;ext=" + b"e" * 9_000, b"5;a=b", b"5 ; a", b"0", b"3", b"8"]), st.binary(max_size=3))
CHUNKS = st.lists(st.tuples(SIZES, st.binary(max_size=8), st.sampled_from([b"\r\n", b"", b"xx", b"\n"])),
                  min_size=1, max_size=4)


@st.composite
def near_valid(draw: st.DrawFn) -> bytes:
    """An answer assembled from near-valid pieces: interim responses, a status line, its framing (odd
    Content-Length and Transfer-Encoding values, both or neither), other odd fields, a body as chunks (odd sizes
    among them) or bytes, maybe cut short."""
    interim = draw(st.lists(st.sampled_from([b"HTTP/1.1 100 Continue\r\n\r\n", b"HTTP/1.1 103 Early Hints\r\n"
                                              b"Link: </a>; rel=preload\r\n\r\n"]), min_size=1, max_size=2)) \
        if draw(st.integers(0, 7)) == 0 else []
    # Mostly a valid status line, so the fields and the body are reached; an odd one a quarter of the time.
    odd = draw(st.integers(0, 3)) == 0
    status = draw(VERSIONS) + b" " + draw(CODES) + draw(REASONS) if odd else \
        b"HTTP/1.1 " + draw(st.sampled_from([b"200 OK", b"500 Oops", b"404", b"204 "]))
    fields = draw(FIELDS)
    framing = draw(st.sampled_from(["length", "chunked", "both", "close"]))
    if framing in ("length", "both"):
        length = draw(LENGTHS) if draw(st.booleans()) else draw(VALUES)
        fields.insert(draw(st.integers(0, len(fields))), b"Content-Length: " + length)
    if framing in ("chunked", "both"):
        coding = b"chunked" if draw(st.integers(0, 3)) else draw(VALUES)
        fields.insert(draw(st.integers(0, len(fields))), b"Transfer-Encoding: " + coding)
        body = b"".join(size + b"\r\n" + data + end for size, data, end in draw(CHUNKS))
        body += draw(st.sampled_from([b"0\r\n\r\n", b"0\r\nTrailer: x\r\n\r\n", b"0\r\n", b""]))
    else:
        body = draw(st.binary(max_size=80))
    raw = b"".join(interim) + b"\r\n".join([status, *fields]) + b"\r\n\r\n" + body
    # Cut short a quarter of the time (anywhere, mostly near the end), else followed by more than any bound.
    return raw[:len(raw) - draw(st.integers(0, len(raw)))] if draw(st.integers(0, 3)) == 0 else raw + TAIL


@st.composite
def valid(draw: st.DrawFn) -> tuple[bytes, int, bytes]:
    """A well-formed final answer (status 200-599 but 204/304, fields, a body framed by Content-Length or by
    chunks with extensions and trailers), its status and body."""
    status = draw(st.integers(200, 599).filter(lambda s: s not in (204, 304)))
    body = draw(st.binary(max_size=MAX_BODY))
    fields = [b"Server: t", b"X-Folded: a\r\n\tb"] if draw(st.booleans()) else []
    if draw(st.booleans()):
        fields.append(b"Content-Length: %d" % len(body) + (b", %d" % len(body) if draw(st.booleans()) else b""))
        framed = body
    else:
        fields.append(draw(st.sampled_from([b"Transfer-Encoding: chunked", b"transfer-encoding:  Chunked "])))
        cuts = sorted(draw(st.lists(st.integers(1, max(1, len(body))), max_size=4, unique=True)))
        pieces = [body[a:b] for a, b in zip([0, *cuts], [*cuts, len(body)], strict=True) if body[a:b]]
        framed = b"".join(b"%x" % len(p) + draw(st.sampled_from([b"", b";x=y", b" ;x"])) + b"\r\n" + p + b"\r\n"
                          for p in pieces) + draw(st.sampled_from([b"0\r\n\r\n", b"0;e\r\nT: v\r\n\r\n"]))
    raw = b"\r\n".join([b"HTTP/1.1 %d %s" % (status, draw(st.sampled_from([b"OK", b"", b"\xe9t\xe9 bien"]))),
                        *fields]) + b"\r\n\r\n" + framed
    return raw, status, body


class TestArbitraryBytes:
    @settings(max_examples=400, deadline=None)
    @given(st.binary(max_size=300), st.booleans())
    async def test_any_bytes_are_a_response_or_an_http_error(self, raw: bytes, head_only: bool) -> None:
        """Whatever the bytes, the parser returns a Response or raises HttpError, within its bounds."""
        check(*await parse(raw, head_only=head_only))

    @settings(max_examples=400, deadline=None)
    @given(st.binary(max_size=300))
    async def test_any_bytes_after_a_valid_status_line_are_a_response_or_an_http_error(self, rest: bytes) -> None:
        """After a valid status line (so the fields and body parsers see the bytes), the same holds."""
        check(*await parse(b"HTTP/1.1 200 OK\r\n" + rest + TAIL))

    @settings(max_examples=1_000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(near_valid(), st.booleans())
    async def test_near_valid_answers_are_a_response_or_an_http_error(self, raw: bytes, head_only: bool) -> None:
        """Random status lines, field sets with odd Content-Length and Transfer-Encoding values, chunk sizes,
        interim responses and truncations: a Response or HttpError, within the bounds."""
        check(*await parse(raw, head_only=head_only))

    @settings(max_examples=300, deadline=None)
    @given(valid())
    async def test_a_well_formed_answer_parses_to_its_status_and_body(self, case: tuple[bytes, int, bytes]) -> None:
        """A well-formed response, framed by Content-Length or by chunks with extensions and trailers, folded
        field lines among its fields, parses to its status and body, and only its own bytes are taken."""
        raw, status, body = case
        outcome, taken = await parse(raw + TAIL)
        assert isinstance(outcome, Response)
        assert (outcome.status, outcome.body, taken) == (status, body, len(raw))


class TestRefused:
    @pytest.mark.parametrize(("raw", "match"), [
        # The three: each raised ValueError out of the client (int() of a Unicode digit, readexactly(-1)).
        (b"HTTP/1.1 200 OK\r\nContent-Length: \xb2\r\n\r\n", "invalid Content-Length"),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n-1\r\nabc\r\n0\r\n\r\n", "invalid chunk size"),
        (b"HTTP/1.1 \xb2\xb2\xb2 OK\r\nContent-Length: 0\r\n\r\n", "not an HTTP/1.x status line"),
        # int() refuses a string of more than 4,300 digits with ValueError too.
        (b"HTTP/1.1 200 OK\r\nContent-Length: " + b"1" * 5_000 + b"\r\n\r\n", "bytes \\(at most 64\\)"),
        # What int() and int(_, 16) take but the grammar does not.
        (b"HTTP/1.1 200 OK\r\nContent-Length: +5\r\n\r\nhello", "invalid Content-Length"),
        (b"HTTP/1.1 200 OK\r\nContent-Length: 1_0\r\n\r\n0123456789", "invalid Content-Length"),
        (b"HTTP/1.1 200 OK\r\nContent-Length: -5\r\n\r\n", "invalid Content-Length"),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n+5\r\nhello\r\n0\r\n\r\n", "invalid chunk size"),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0x5\r\nhello\r\n0\r\n\r\n", "invalid chunk size"),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + b"f" * 20 + b"\r\n", "invalid chunk size"),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello!!\r\n0\r\n\r\n", "longer than its size"),
        # Framing two parsers could read two ways.
        (b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nContent-Length: 5\r\n\r\nhello", "conflicting Content-Length"),
        (b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n", "both"),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", "unsupported transfer coding"),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: xchunked\r\n\r\n", "unsupported transfer coding"),
        # Malformed fields and status lines.
        ("HTTP/1.1 200 OK\r\n見出し: 値\r\n\r\n".encode(), "malformed header field"),
        (b"HTTP/1.1 200 OK\r\nContent-Length : 0\r\n\r\n", "malformed header field"),
        (b"HTTP/1.1 200 OK\r\n folded first\r\n\r\n", "whitespace before the first header field"),
        (b"HTTP/1.1 200 OK\r\nX-A: a\x00b\r\n\r\n", "control character"),
        (b"HTTP/1.1 200 " + b"A" * 10_000 + b"\r\n\r\n", "status line of 10013 bytes"),
        (b"HTTP/1.1 999 Library Error\r\n\r\n", "invalid status code 999"),
        (b"HTTP/1.1 101 Switching Protocols\r\n\r\n", "unexpected 101"),
        (b"HTTP/2 200\r\n\r\n", "not an HTTP/1.x status line"),
        # Too large, or cut short.
        (b"HTTP/1.1 200 OK\r\n" + b"X-A: b\r\n" * 3_000 + b"\r\n", "head too large"),
        (b"HTTP/1.1 103 Early Hints\r\n" + b"Link: </a>\r\n" * 1_000 + b"\r\n" + b"HTTP/1.1 103 Early Hints\r\n"
         + b"Link: </a>\r\n" * 1_000 + b"\r\nHTTP/1.1 200 OK\r\n\r\n", "head too large"),
        (b"HTTP/1.1 200 OK\r\n\r\n" + b"x" * 65, "over 64 bytes"),
        (b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nhello", "truncated response body"),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhel", "truncated chunked body"),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + b"1;" + b"e" * 20_000 + b"\r\nx\r\n",
         "chunk size line too long"),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + (b"1;" + b"e" * 8_000 + b"\r\nx\r\n") * 3,
         "chunked framing too large"),
        (b"HTTP/1.1 200 OK\r\nContent", "truncated response head"),
        (b"", "connection closed before a response"),
    ])
    async def test_a_malformed_answer_is_an_http_error(self, raw: bytes, match: str) -> None:
        """Each answer outside RFC 9112's grammar or the client's bounds is an HttpError saying why."""
        outcome, _ = await parse(raw)
        assert isinstance(outcome, HttpError)
        with pytest.raises(HttpError, match=match):
            raise outcome


class TestAccepted:
    async def test_interim_responses_are_read_past(self) -> None:
        """A 100 and a 103 before the final response are read past (RFC 9110 §15.2); the final one is returned."""
        outcome, _ = await parse(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n"
                                 b"HTTP/1.1 201 Created\r\nContent-Length: 2\r\n\r\nok")
        assert outcome == Response(201, "Created", {"content-length": "2"}, b"ok")

    async def test_fields_are_joined_unfolded_and_kept_as_latin_1(self) -> None:
        """A repeated field's values are joined with ", ", a folded line is unfolded with a space, a value's bytes
        above 0x7F are kept as Latin-1, equal Content-Lengths are one, and a status line may lack its reason."""
        outcome, _ = await parse(b"HTTP/1.1 200\r\nX-A: 1\r\nx-a:2 \r\nX-B: one\r\n  two\r\nX-C: \xe9t\xe9\r\n"
                                 b"Content-Length: 3\r\nContent-Length: 3\r\n\r\nabc")
        assert outcome == Response(200, "", {"x-a": "1, 2", "x-b": "one two", "x-c": "été",
                                             "content-length": "3, 3"}, b"abc")

    async def test_a_body_may_end_at_the_close_and_a_head_has_none(self) -> None:
        """Without Content-Length or Transfer-Encoding the body is what comes before the close; a HEAD's, a 204's
        and a 304's response has no body whatever its fields say."""
        assert (await parse(b"HTTP/1.0 200 OK\r\n\r\nto the end"))[0] == Response(200, "OK", {}, b"to the end")
        for raw, head_only in ((b"HTTP/1.1 200 OK\r\nContent-Length: 99\r\n\r\n", True),
                               (b"HTTP/1.1 204 No Content\r\nContent-Length: 99\r\n\r\n", False),
                               (b"HTTP/1.1 304 Not Modified\r\nTransfer-Encoding: chunked\r\n\r\n", False)):
            outcome, taken = await parse(raw + TAIL, head_only=head_only)
            assert isinstance(outcome, Response)
            assert (outcome.body, taken) == (b"", len(raw))


class TestParseUrl:
    def test_a_host_is_kept_in_its_ascii_form(self) -> None:
        """An internationalised host name becomes its IDNA form, which the resolver, Host and SNI take."""
        assert str(parse_url("https://b\u00fccher.example:8443/in?x=1")) == "https://xn--bcher-kva.example:8443/in?x=1"

    @pytest.mark.parametrize(("text", "match"), [
        ("http://" + "a" * 64 + ".example/", "invalid host name"),
        ("http://hooks.example/\u20ac", "ASCII without spaces"),
        ("http://hooks.example/a b", "ASCII without spaces"),
    ])
    def test_a_url_no_request_could_carry_is_refused(self, text: str, match: str) -> None:
        """A host name with no IDNA form or a target that is not ASCII is refused when the URL is read (a setting
        at start), where every request would have raised."""
        with pytest.raises(ValueError, match=match):
            parse_url(text)


class TestBasicAuthorization:
    def test_the_password_is_the_files_text_less_its_line_end(self, tmp_path: Path) -> None:
        """The header carries the user and the file's text, a trailing line end dropped and nothing else."""
        password = tmp_path / "password"
        password.write_text(" correct horse \r\n")
        value = basic_authorization("prometheus", password)
        assert value == "Basic " + base64.b64encode(b"prometheus: correct horse ").decode()

    def test_an_unreadable_file_is_named_and_its_content_never_shown(self, tmp_path: Path) -> None:
        """A missing file or one that is not UTF-8 raises ValueError naming the file, without its bytes."""
        with pytest.raises(ValueError, match=f"cannot read the password file {tmp_path / 'nope'}: No such file"):
            basic_authorization("u", tmp_path / "nope")
        binary = tmp_path / "binary"
        binary.write_bytes(b"secret\xff")
        with pytest.raises(ValueError, match="cannot read the password file") as info:
            basic_authorization("u", binary)
        assert "secret" not in str(info.value)
