"""Credential redaction for what agents receive: passages, excerpts and whole notes go on to the agent's model
provider, so credential-shaped strings are replaced by `[redacted: <kind>]` first.

The detectors are Yelp's detect-secrets plugins (their compiled `denylist` patterns and the keyword module's
assignment patterns, run with positions so that only the secret is cut), filtered by detect-secrets' heuristics
(templated, sequential, UUID, id, indirect reference) and by a placeholder filter of our own: notes are full of
`--password {{password}}`, `token: <your token>` and `$PASSWORD`, which must stay as written. The high-entropy
string detectors are not used: they flag ordinary hashes, ids and command lines.

Where detect-secrets falls short there is a small extension, each with its reason at the rule: whole private-key
blocks (the plugin flags only the BEGIN line), URL passwords with no user name (`redis://:pw@host`) or with
`!$&'()*+,;=` in them, unquoted AWS secret keys, GitHub fine-grained tokens, Google API keys, Anthropic keys and
`token = ...` assignments.

Most text holds no credential, and must cost next to nothing: `_candidates` finds, with a few byte searches,
the lines that could hold one (a keyword, `://user:pass@`, or a run of 20 token characters), and only those are
scanned, each by the detectors whose gate it passes.

Thread-safe: detect-secrets' global settings are never touched; the patterns are built once, under a lock, and
only read afterwards. detect-secrets is imported by the first call that finds a candidate line.
"""

from __future__ import annotations

import itertools
import re
import string
import threading
from dataclasses import dataclass
from typing import Callable, Iterator

MARKER = "[redacted: {}]"

# The candidate lines (see `_candidates`). Every detector below needs, on its line, one of the keyword pieces
# (the keyword patterns: key, pass, pwd, secret, contrase(ña), token; AWS secret keys: aws; Azure AccountKey=;
# npm _authToken=), or a password in a URL, or a run of 20 token characters: every fixed-format token (AKIA + 16,
# ghp_ + 36, xoxb-..., a JWT's header, the 44 to 64 characters of the IBM, Cloudant and SoftLayer keys, ...);
# Artifactory's shortest, 13, is shorter than any it issues.
_KEYWORD_PIECES = (b"key", b"pass", b"pw", b"secret", b"contrase", b"token", b"aws")
_URL_PASSWORD = re.compile(rb"://[^\s/]*:[^\s/]*@")
_RUN = b"t" * 20
_RUN_BYTES = bytes(
    ord("t") if chr(i) in string.ascii_letters + string.digits + "_=+-" else ord(" ") for i in range(256))
_KEYWORD, _URL, _TOKEN = "keyword", "url", "token"

# Private keys span lines; detect-secrets' PrivateKeyDetector flags only the BEGIN line, so the whole block is cut
# here: BEGIN, the key lines after it and END, or, where a passage cuts the block, the key lines after BEGIN or
# before END. A superset of the plugin's markers: PKCS#8 "ENCRYPTED PRIVATE KEY" too, which the plugin misses.
_KEY_BLOCK_PIECES = ("PRIVATE KEY", "PuTTY-User-Key-File")
_KEY_BEGIN = re.compile(r"-{4,5} ?BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)? ?-{4,5}|PuTTY-User-Key-File-\d+:")
_KEY_END = re.compile(r"-{4,5} ?END (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)? ?-{4,5}")
# A line inside a key block: base64, a PEM / PGP / PuTTY header, a PGP checksum, or blank (PGP armour).
_KEY_BODY = re.compile(
    r"\s*(?:[A-Za-z0-9+/=]{4,}|=[A-Za-z0-9+/]{4}"
    r"|(?:Proc-Type|DEK-Info|Comment|Version|Hash|Charset|Encryption|Public-Lines|Private-Lines|Private-MAC"
    r"|Private-Hash|Key-Derivation|Argon2-\w+)\s*:.*)?\s*"
)
# Key material, not a "..." stand-in in a tutorial: a block is cut only if it holds a run like this.
_KEY_MATERIAL = re.compile(r"[A-Za-z0-9+/]{16,}")

# Words that placeholders are made of: `your_password`, `API_KEY_HERE`, `changeme`, `<token>`.
_PLACEHOLDER_WORDS = frozenset("""
    password passwd pass pwd passphrase pw secret secrets token tokens key keys api apikey access auth bearer
    client private app account user username login name value here your my the a an of for to example examples
    sample dummy placeholder fake test testing changeme change me redacted hidden none null nil true false yes no
    empty string str text new old current default foo bar baz qux xxx xyz abc admin root guest demo some something
    id env var variable file path url db database mysql postgres master service session personal generated goes
    insert put enter replace real actual valid own required optional x
""".split())
_REPEATED = re.compile(r"(.)\1{7}")
_TEMPLATE = re.compile(r"\{\{|\}\}|<[^<>]*>|%\w+%|\$\{|\$\(|\[\[|\]\]")
_TEMPLATE_SPAN = re.compile(r"\{\{.*?\}\}")
_PATH_LIKE = re.compile(
    r"(?:~|\.{1,2})?/\S*|[\w.-]+\.(?:pem|key|txt|json|crt|cer|p12|pfx|der|pub|gpg|asc|env|ya?ml|toml|cfg|conf|ini"
    r"|jks|keystore|kdbx|gz|zip|sh|py|js|ts)|id_(?:rsa|dsa|ecdsa|ed25519)\w*"
)
_DOTTED_NAME = re.compile(r"[A-Za-z_]+(?:\.[A-Za-z_]+)+(?:\(\))?")  # config.api_key, not ya29.a0Af3...
_CONSTANT_NAME = re.compile(r"[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+")
# Where an unquoted value ends: detect-secrets' keyword patterns run to the end of the line (config files).
_UNQUOTED_END = re.compile(r"[\s;&,`)\]}>|]")
# A bare value made of words is prose or a name (`pwd: Shows the directory`, `accessToken: squareAccessToken`,
# `user:password:generate`), not a password; random letters (hf_ + 34) seldom fall into words like these.
_WORD_PIECE = r"(?:[A-Z]?[a-z]{2,}(?:[A-Z][a-z]{2,})*|[A-Z]{2,})"
_WORD = re.compile(rf"{_WORD_PIECE}(?:[_-]{_WORD_PIECE})*")
# What Artifactory's patterns take around the token, and Azure's before it.
_LEADING = re.compile(r"[\s\"'=:]*(?:AccountKey=)?")

# Where finds overlap, the merged span takes the kind of the most specific (lowest rank).
_RANK_TOKEN, _RANK_URL, _RANK_KEYWORD = 0, 1, 2


def redact(text: str) -> tuple[str, list[str]]:
    """`text` with every credential replaced by `[redacted: <kind>]`, and the kinds found in order of appearance.

    Text with no credential comes back unchanged. Lines are kept: a private-key block becomes one line, other
    credentials are replaced within their line. Redacting the result again changes nothing.
    """
    return _scan(text, rewrite=True)


def credential_kinds(text: str) -> list[str]:
    """The kinds of credential in `text`, in order of appearance (what `redact` would replace), text untouched."""
    return _scan(text, rewrite=False)[1]


@dataclass(frozen=True)
class _Rule:
    """One detector pattern: the kind it finds (or None: tell it by the keyword), which group holds the secret
    (None: the whole match, less the delimiters some patterns take around it), and the check the secret must
    pass. `families`: the candidate lines it can match in (see `_candidates`). `gate`: conditions on the line,
    each a tuple of lower-case pieces one of which must be in the lower-cased line, or a pattern to find in the
    line; a cheap test that its pattern cannot match without."""

    kind: str | None
    regex: re.Pattern
    rank: int
    families: frozenset[str]
    gate: tuple[tuple[str, ...] | str, ...]
    group: int | None = None
    check: Callable[[str, re.Match], bool] | None = None


_Gated = list[tuple[tuple[tuple[re.Pattern, bool], ...], list[_Rule]]]
_rules_lock = threading.Lock()
_rules_cache: dict[frozenset[str], _Gated] | None = None


def _rules(families: set[str]) -> _Gated:
    """The detector patterns that can match in a line of `families`, grouped by gate. Built once, for every set
    of families, under the lock (detect-secrets is imported here); read only afterwards."""
    global _rules_cache
    if _rules_cache is None:
        with _rules_lock:
            if _rules_cache is None:
                by_gate: dict[tuple, list[_Rule]] = {}
                for rule in _build_rules():
                    by_gate.setdefault((rule.families, rule.gate), []).append(rule)
                everyone = (_KEYWORD, _URL, _TOKEN)
                compiled = {gate: tuple((re.compile("|".join(map(re.escape, c))), True) if isinstance(c, tuple)
                                        else (re.compile(c), False) for c in gate) for _, gate in by_gate}
                _rules_cache = {
                    frozenset(chosen): [(compiled[gate], rules) for (fams, gate), rules in by_gate.items()
                                        if fams & frozenset(chosen)]
                    for n in range(1, 4) for chosen in itertools.combinations(everyone, n)}
    return _rules_cache[frozenset(families)]


def _build_rules() -> list[_Rule]:
    from detect_secrets.plugins import basic_auth, keyword
    from detect_secrets.plugins.artifactory import ArtifactoryDetector
    from detect_secrets.plugins.aws import AWSKeyDetector
    from detect_secrets.plugins.azure_storage_key import AzureStorageKeyDetector
    from detect_secrets.plugins.cloudant import CloudantDetector
    from detect_secrets.plugins.discord import DiscordBotTokenDetector
    from detect_secrets.plugins.github_token import GitHubTokenDetector
    from detect_secrets.plugins.gitlab_token import GitLabTokenDetector
    from detect_secrets.plugins.ibm_cloud_iam import IbmCloudIamDetector
    from detect_secrets.plugins.ibm_cos_hmac import IbmCosHmacDetector
    from detect_secrets.plugins.jwt import JwtTokenDetector
    from detect_secrets.plugins.mailchimp import MailchimpDetector
    from detect_secrets.plugins.npm import NpmDetector
    from detect_secrets.plugins.openai import OpenAIDetector
    from detect_secrets.plugins.pypi_token import PypiTokenDetector
    from detect_secrets.plugins.sendgrid import SendGridDetector
    from detect_secrets.plugins.slack import SlackDetector
    from detect_secrets.plugins.softlayer import SoftlayerDetector
    from detect_secrets.plugins.square_oauth import SquareOAuthDetector
    from detect_secrets.plugins.stripe import StripeDetector
    from detect_secrets.plugins.telegram_token import TelegramBotTokenDetector
    from detect_secrets.plugins.twilio import TwilioKeyDetector

    token, word, url = frozenset({_TOKEN}), frozenset({_KEYWORD}), frozenset({_URL})
    cloud = ("key", "pw", "pass", "token")
    # A plugin, the kind it finds (or one per pattern of its denylist where they find different things), the
    # candidate lines it can match in, its gate. The secret is the whole match, but for the plugins in `valued`
    # (assignments and URLs: the group of the value) and AWS's second pattern (the same).
    plugins: list[tuple[type, str | tuple[str, ...], frozenset[str], tuple]] = [
        (AWSKeyDetector, ("aws-access-key", "aws-secret-key"), token | word,
         (("aws", "a3t", "abia", "acca", "akia", "asia"),)),
        (AzureStorageKeyDetector, "azure-storage-key", word, (("accountkey=",),)),
        (GitHubTokenDetector, "github-token", token, (("ghp_", "gho_", "ghu_", "ghs_", "ghr_"),)),
        (GitLabTokenDetector, "gitlab-token", token, (("glpat-", "gldt-", "glft-", "glsoat-", "glrt-", "glcbt-",
                                                       "glimt-", "glptt-", "glagent-", "gloas-", "gr1348941"),)),
        (SlackDetector, ("slack-token", "slack-webhook"), token, (("xox", "hooks.slack"),)),
        (StripeDetector, "stripe-key", token, (("k_live_",),)),
        (TwilioKeyDetector, "twilio-key", token, (("ac", "sk"), r"AC[a-z0-9]{32}|SK[a-z0-9]{32}")),
        (OpenAIDetector, "openai-key", token, (("t3blbkfj",),)),
        (SendGridDetector, "sendgrid-key", token, (("sg.",),)),
        (MailchimpDetector, "mailchimp-key", token, (("-us",),)),
        (NpmDetector, "npm-token", word, (("_authtoken",),)),
        (PypiTokenDetector, "pypi-token", token, (("pypi-",),)),
        (DiscordBotTokenDetector, "discord-token", token, (("m", "n", "o"), r"[MNO][a-zA-Z\d_-]{23,25}\.")),
        (TelegramBotTokenDetector, "telegram-token", token, ((":",), r"\d{8}:")),
        (SquareOAuthDetector, "square-oauth-secret", token, (("sq0csp-",),)),
        (ArtifactoryDetector, "artifactory-token", token, (("akc", "ap"),)),
        (IbmCloudIamDetector, "ibm-cloud-key", token, (cloud, r"[\w-]{44}")),
        (IbmCosHmacDetector, "ibm-cos-key", token, (("secret",), r"[a-f0-9]{48}")),
        (CloudantDetector, "cloudant-key", token, (("cl",), r"[0-9a-f]{64}|[a-z]{24}")),
        (SoftlayerDetector, "softlayer-key", token, (("sl",), r"[a-z0-9]{64}")),
    ]
    valued = (NpmDetector, IbmCloudIamDetector, IbmCosHmacDetector, CloudantDetector, SoftlayerDetector)
    rules = [_Rule(kinds[i] if isinstance(kinds, tuple) else kinds, regex, _RANK_TOKEN, families, gate,
                   1 if plugin in valued or (plugin, i) == (AWSKeyDetector, 1) else None, _token_check)
             for plugin, kinds, families, gate in plugins for i, regex in enumerate(plugin.denylist)]
    rules += [
        # JwtTokenDetector's pattern ends lazily, so its match leaves the signature out: the same shape with every
        # dot-separated part taken, and the plugin's check that the parts decode. Parts are bounded and not given
        # back, so that a long run of letters costs one pass, not one per "eyJ" in it.
        _Rule("jwt", re.compile(r"eyJ[\w=-]{1,8192}+\.[\w=-]{1,8192}+(?:\.[\w+/=-]{1,8192}+)*", re.ASCII),
              _RANK_TOKEN, token, (("eyj",),), check=lambda secret, m: JwtTokenDetector.is_formally_valid(secret)),
        # AWSKeyDetector wants the secret key quoted; .env files and ~/.aws/credentials assign it bare.
        _Rule("aws-secret-key", re.compile(
            r"aws[\w.-]{0,20}?(?:key|pwd|pw|password|pass|token)\w*['\"]?\s*[:=]\s*['\"]?([0-9a-zA-Z/+]{40})"
            r"(?![0-9a-zA-Z/+=])", re.IGNORECASE), _RANK_TOKEN, word, (("aws",), r"[0-9a-zA-Z/+]{40}"), 1,
              _token_check),
        # Fine-grained GitHub tokens (2022) are not in GitHubTokenDetector.
        _Rule("github-token", re.compile(r"github_pat_[A-Za-z0-9_]{50,}"), _RANK_TOKEN, token,
              (("github_pat_",),), check=_token_check),
        # Google API keys: detect-secrets has no Google plugin (a service account's key is a private-key block).
        _Rule("gcp-api-key", re.compile(r"AIza[0-9A-Za-z_-]{35}(?![0-9A-Za-z_-])"), _RANK_TOKEN, token,
              (("aiza",),), check=_token_check),
        # Anthropic keys: OpenAIDetector looks for OpenAI's T3BlbkFJ marker only.
        _Rule("anthropic-key", re.compile(r"sk-ant-[a-z0-9]+-[A-Za-z0-9_-]{40,}"), _RANK_TOKEN, token,
              (("sk-ant-",),), check=_token_check),
    ]
    # Passwords in URLs (BasicAuthDetector), and what its pattern leaves out: no user name (redis://:pw@host), and
    # RFC 3986's sub-delimiters (!$&'()*+,;=), which a password may hold (an @ still ends it).
    with_subdelims = re.compile(r"://[^{0}\s]*:([^{0}\s]+)@".format(re.escape(basic_auth.RESERVED_CHARACTERS)))
    rules += [_Rule("connection-string", regex, _RANK_URL, url, (("@",), r"://[^\s/]*:[^\s/]*@"), 1, _value_check)
              for regex in [*basic_auth.BasicAuthDetector.denylist, with_subdelims]]
    # Keyword assignments: the quoted forms of code and the bare forms of config files (.env, YAML, INI), since a
    # note holds both. detect-secrets' keyword list has no "token"; access_token / HF_TOKEN = ... are common in
    # notes, so the patterns are built again with it added (not tokenizer / tokenise). Each form needs a keyword,
    # and after it : = or !, or before it == or !=, or a closing ; (`private_key "..." ;`).
    assignments = {**keyword.QUOTES_REQUIRED_DENYLIST_REGEX_TO_GROUP, **keyword.CONFIG_DENYLIST_REGEX_TO_GROUP,
                   **keyword.GOLANG_DENYLIST_REGEX_TO_GROUP}
    with_token = keyword.DENYLIST_REGEX.replace(")", "|token(?!i[sz]))", 1)
    gate = (("key", "pass", "pwd", "secret", "contrase", "token"),
            r"(?i:key|pass|pwd|secret|contrase|token)\w*[\]'\"]{0,2}\s*[:=!]|[!=]=|;")
    for regex, group in assignments.items():
        if keyword.DENYLIST_REGEX not in regex.pattern:
            raise RuntimeError("detect-secrets' keyword patterns are not the ones puremind.redact was built for")
        pattern = re.compile(regex.pattern.replace(keyword.DENYLIST_REGEX, with_token), regex.flags)
        rules.append(_Rule(None, pattern, _RANK_KEYWORD, word, gate, group, _value_check))
    return rules


def _keyword_kind(name: str) -> str:
    """The kind of a keyword assignment, by its keyword (`name`: the assignment less its value): password, token,
    secret (private_key too) or api-key."""
    name = name.lower()
    for piece, kind in (("pass", "password"), ("pwd", "password"), ("contrase", "password"), ("token", "token"),
                        ("secret", "secret"), ("priv", "secret")):
        if piece in name:
            return kind
    return "api-key"


def _heuristic_false(secret: str) -> bool:
    """detect-secrets' own filters for what is not a secret: {templated}, sequential, UUIDs, no letters."""
    from detect_secrets.filters import heuristic

    return (heuristic.is_templated_secret(secret) or heuristic.is_sequential_string(secret)
            or heuristic.is_potential_uuid(secret) or heuristic.is_not_alphanumeric_string(secret))


def _is_placeholder(value: str) -> bool:
    """A stand-in for a credential: `{{password}}`, `<token>`, `%PASSWORD%`, `${TOKEN}`, `your_password`, `xxxx`,
    `***`, `abc...`, `ghp_00000000...`, an earlier redaction."""
    if value.startswith("[redacted") or _TEMPLATE.search(value) or "..." in value or "\u2026" in value:
        return True
    if set(value.lower()) <= set("x*.#-_0 ") or len(set(value)) <= 2 or _REPEATED.search(value):
        return True
    return all(w in _PLACEHOLDER_WORDS for w in re.split(r"[\W_]+", value.lower()) if w)


def _token_check(secret: str, match: re.Match) -> bool:
    """A fixed-format token is real unless detect-secrets' heuristics or the placeholder filter (on what follows
    its prefix: `ghp_xxxx...`) say otherwise, or it is a documented example (AKIAIOSFODNN7EXAMPLE): "example" in
    a random token is beyond chance."""
    return not (_heuristic_false(secret) or _is_placeholder(secret.split("_", 1)[-1].split("-", 1)[-1])
                or "example" in secret.lower())


def _value_check(secret: str, match: re.Match) -> bool:
    """A keyword's value or a URL's password: a literal of 4 characters or more, not a number, a reference or a
    stand-in (detect-secrets' filters, then ours: paths, URLs, `config.password`, `API_KEY`)."""
    from detect_secrets.filters import heuristic

    if len(secret) < 4:
        return False
    if _heuristic_false(secret) or heuristic.is_prefixed_with_dollar_sign(secret) or _is_placeholder(secret):
        return False
    assignment = match.string[match.start():]  # to the end of the line: `= os.environ["DB_PASSWORD"]`
    if heuristic.is_indirect_reference(assignment) or heuristic.is_likely_id_string(secret, match.group(0)):
        return False
    if "://" in secret or _PATH_LIKE.fullmatch(secret):
        return False
    return not (_DOTTED_NAME.fullmatch(secret) or _CONSTANT_NAME.fullmatch(secret))


def _quoted(line: str, start: int, end: int) -> bool:
    return 0 < start and end < len(line) and line[start - 1] in "'\"`" and line[end] == line[start - 1]


def _open(gate: tuple[tuple[re.Pattern, bool], ...], line: str, low: str) -> bool:
    """Whether every condition of a gate is found in `line` (or in `low`, the line lower-cased, for the pieces)."""
    for pattern, lower in gate:
        if not pattern.search(low if lower else line):
            return False
    return True


def _spans(line: str, gated: _Gated) -> Iterator[tuple[int, int, int, str]]:
    """(start, end, rank, kind) of every secret the rules find in `line`."""
    low = line.lower()
    templates = None
    for rule, m in ((rule, m) for gate, rules in gated if _open(gate, line, low)
                    for rule in rules for m in rule.regex.finditer(line)):
        start, end = m.span(rule.group or 0)
        if rule.group is None:
            start += len(_LEADING.match(line, start, end).group(0))
            end -= len(line[start:end]) - len(line[start:end].rstrip(" \t\"'"))
        if rule.rank == _RANK_KEYWORD and not _quoted(line, start, end):
            cut = _UNQUOTED_END.search(line, start, end)
            end = cut.start() if cut else end
            while end > start and line[end - 1] in ".,:'\"":  # `password: Hunter22.` ends a sentence
                end -= 1
            if _WORD.fullmatch(line, start, end):
                continue
        if end <= start:
            continue
        if templates is None:
            templates = [t.span() for t in _TEMPLATE_SPAN.finditer(line)]
        if any(a <= start and end <= b for a, b in templates):  # inside {{ }}: an example to fill in
            continue
        if rule.check is None or rule.check(line[start:end], m):
            kind = rule.kind or _keyword_kind(line[m.start():start] + line[end:m.end()])
            yield start, end, rule.rank, kind


def _redact_line(line: str, gated: _Gated) -> tuple[str, list[str]]:
    """One line with its secrets replaced; overlapping finds merge, taking the most specific kind."""
    found = sorted(_spans(line, gated))
    if not found:
        return line, []
    merged: list[list] = []
    for start, end, rank, kind in found:
        if merged and start < merged[-1][1]:
            last = merged[-1]
            last[1] = max(last[1], end)
            if rank < last[2]:
                last[2], last[3] = rank, kind
        else:
            merged.append([start, end, rank, kind])
    out, at = [], 0
    for start, end, _, kind in merged:
        out += [line[at:start], MARKER.format(kind)]
        at = end
    out.append(line[at:])
    return "".join(out), [m[3] for m in merged]


def _candidates(text: str) -> dict[int, set[str]]:
    """{line index: families} of the lines (split at \\n) that could hold a credential: a keyword piece (family
    "keyword"), a password in a URL ("url"), a run of 20 token characters ("token"). Byte searches over the whole
    text, then one count of line ends per find: no work at all on the other lines."""
    data = text.encode("utf-8", "surrogatepass")
    low = data.lower()  # ASCII only: byte offsets stay put
    runs = data.translate(_RUN_BYTES)
    finds = [(m.start(), _URL) for m in _URL_PASSWORD.finditer(data)]
    for family, haystack, piece in [*((_KEYWORD, low, p) for p in _KEYWORD_PIECES), (_TOKEN, runs, _RUN)]:
        at = haystack.find(piece)
        while at >= 0:
            finds.append((at, family))
            line_end = data.find(b"\n", at)
            at = haystack.find(piece, line_end) if line_end >= 0 else -1
    lines: dict[int, set[str]] = {}
    line, counted = 0, 0
    for at, family in sorted(finds):
        line += data.count(b"\n", counted, at)
        counted = at
        lines.setdefault(line, set()).add(family)
    return lines


def _key_blocks(lines: list[str]) -> tuple[list[str], list[int]]:
    """`lines` (no line ends) with each private-key block cut to one `[redacted: private-key]` line (the text
    before BEGIN and after END kept), and the indexes of the cut lines in the new list."""
    out: list[str] = []
    found: list[int] = []
    marker = MARKER.format("private-key")
    i = 0
    while i < len(lines):
        line = lines[i]
        begin = _KEY_BEGIN.search(line)
        end = _KEY_END.search(line, begin.end()) if begin else _KEY_END.search(line)
        if begin and end:  # one line: a key in JSON ("-----BEGIN ...\nMII...\n-----END ...")
            if _KEY_MATERIAL.search(line, begin.end(), end.start()):
                line = line[:begin.start()] + marker + line[end.end():]
                found.append(len(out))
            out.append(line)
            i += 1
        elif begin:  # the key lines that follow, through END if it comes next, less the blank lines after them
            last = i
            while last + 1 < len(lines) and _KEY_BODY.fullmatch(lines[last + 1]):
                last += 1
            close = _KEY_END.search(lines[last + 1]) if last + 1 < len(lines) else None
            if close:
                last += 1
                after = lines[last][close.end():]
            else:
                while last > i and not lines[last].strip():
                    last -= 1
                after = "\r" if lines[last].endswith("\r") else ""
            body = line[begin.end():] + "\n".join(lines[i + 1:last + 1])
            if not _KEY_MATERIAL.search(body) and not line[begin.start():].startswith("PuTTY"):
                out.append(line)
                i += 1
                continue
            found.append(len(out))
            out.append(line[:begin.start()] + marker + after)
            i = last + 1
        elif end:  # the block began before this text: the key lines above END
            first = len(out)
            while first > 0 and _KEY_BODY.fullmatch(out[first - 1]) and out[first - 1].strip():
                first -= 1
            if _KEY_MATERIAL.search("\n".join(out[first:]) + line[:end.start()]):
                head = out[first] if first < len(out) else line
                indent = head[:len(head) - len(head.lstrip())]
                del out[first:]
                found.append(len(out))
                line = indent + marker + line[end.end():]
            out.append(line)
            i += 1
        else:
            out.append(line)
            i += 1
    return out, found


def _scan(text: str, rewrite: bool) -> tuple[str, list[str]]:
    candidates = _candidates(text)
    lines: list[str] | None = None
    blocks: list[int] = []
    if any(piece in text for piece in _KEY_BLOCK_PIECES):
        cut, blocks = _key_blocks(text.split("\n"))
        if blocks:  # lines were merged: find the candidates again
            lines = cut
            candidates = _candidates("\n".join(lines))
    if not candidates and not blocks:
        return text, []
    if lines is None:
        lines = text.split("\n")
    found: dict[int, list[str]] = {i: ["private-key"] for i in blocks}
    for i, families in candidates.items():
        new, kinds = _redact_line(lines[i], _rules(families))
        if kinds:
            found.setdefault(i, []).extend(kinds)
            lines[i] = new
    kinds = [kind for i in sorted(found) for kind in found[i]]
    if not found or not rewrite:
        return text, kinds
    return "\n".join(lines), kinds
