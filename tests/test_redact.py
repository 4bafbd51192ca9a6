"""Credential redaction of what agents receive (puremind.redact): every credential in realistic notes is replaced
by `[redacted: <kind>]` and nothing else moves; placeholders and ordinary command lines are left alone.

The credentials are fakes shaped like real ones, made here from a seeded generator and with their prefixes split in
the source, so that no scanner (nor pureMind's own index of this repository) finds a token in this file.
"""

from __future__ import annotations

import base64
import json
import random
import string
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from puremind.redact import _candidates, credential_kinds, redact

RNG = random.Random(35)
ALNUM = string.ascii_letters + string.digits
B64 = ALNUM + "+/"


def rand(n: int, alphabet: str = ALNUM) -> str:
    return "".join(RNG.choice(alphabet) for _ in range(n))


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def jwt() -> str:
    header = b64url(json.dumps({"alg": "HS256", "typ": "JWT"}).encode())
    payload = b64url(json.dumps({"sub": "svc-deploy", "iat": 1767225600, "scope": "repo:write"}).encode())
    return f"{header}.{payload}.{b64url(RNG.randbytes(32))}"


def pem(label: str, lines: int = 8, width: int = 64) -> str:
    body = [rand(width, B64) for _ in range(lines)] + [rand(24, B64) + "=="]
    return "\n".join([f"-----BEGIN {label}-----", *body, f"-----END {label}-----"])


AWS_ID = "AK" + "IA" + rand(16, string.ascii_uppercase + string.digits)
AWS_TEMP_ID = "AS" + "IA" + rand(16, string.ascii_uppercase + string.digits)
AWS_SECRET = rand(40, B64)
AWS_SECRET_2 = rand(40, B64)
AZURE_KEY = rand(86, B64) + "=="
GHP = "gh" + "p_" + rand(36)
GHO = "gh" + "o_" + rand(36)
GHS = "gh" + "s_" + rand(36)
GITHUB_PAT = "github" + "_pat_" + rand(22) + "_" + rand(59)
GLPAT = "gl" + "pat-" + rand(20, ALNUM + "_-")
GLRUNNER = "GR13" + "48941" + rand(20)
XOXB = "xo" + "xb-" + rand(12, string.digits) + "-" + rand(13, string.digits) + "-" + rand(24)
XOXP = "xo" + "xp-" + rand(12, string.digits) + "-" + rand(12, string.digits) + "-" + rand(13, string.digits) + "-" \
    + rand(32, string.ascii_lowercase + string.digits)
WEBHOOK = "https://hooks." + "slack.com/services/T" + rand(8, string.ascii_uppercase + string.digits) + "/B" \
    + rand(10, string.ascii_uppercase + string.digits) + "/" + rand(24)
SK_LIVE = "sk" + "_live_" + rand(24)
RK_LIVE = "rk" + "_live_" + rand(24)
TWILIO_SID = "A" + "C" + rand(32, "0123456789abcdef")
TWILIO_KEY = "S" + "K" + rand(32, "0123456789abcdef")
OPENAI = "sk-" + "proj-" + rand(20) + "T3Blb" + "kFJ" + rand(20)
SENDGRID = "S" + "G." + rand(22, ALNUM + "_-") + "." + rand(43, ALNUM + "_-")
MAILCHIMP = rand(32, "0123456789abcdef") + "-us" + "12"
NPM = "np" + "m_" + rand(36)
PYPI = "py" + "pi-AgEIcHlwaS5vcmc" + rand(80, ALNUM + "_-")
DISCORD = "M" + rand(23) + "." + rand(6) + "." + rand(27)
TELEGRAM = "8" + rand(8, string.digits) + ":AA" + rand(33, ALNUM + "_-")
SQUARE = "sq0" + "csp-" + rand(43, ALNUM + "_-")
GCP = "AI" + "za" + rand(35, ALNUM + "_-")
ANTHROPIC = "sk-" + "ant-api03-" + rand(93, ALNUM + "_-") + "AA"
JWT_1, JWT_2 = jwt(), jwt()
DJANGO = "django-insecure-" + rand(40, string.ascii_lowercase + string.digits + "!@#%^&*(-_=+)")
HF = "h" + "f_" + rand(34, string.ascii_letters)
WIREGUARD = rand(42, B64) + "A="
K8S_PASSWORD = base64.b64encode(b"Pr0d-" + rand(12).encode()).decode()
RSA_BLOCK = pem("RSA PRIVATE KEY", 12)
OPENSSH_BLOCK = pem("OPENSSH PRIVATE KEY", 6, 70)
EC_BLOCK = pem("EC PRIVATE KEY", 3)
PKCS8_ENCRYPTED = pem("ENCRYPTED PRIVATE KEY", 10)
PKCS8_JSON = "-----BEGIN PRIVATE KEY-----\\n" + "\\n".join(rand(64, B64) for _ in range(6)) \
    + "\\n-----END PRIVATE KEY-----"
PGP_BLOCK = "\n".join(["-----BEGIN PGP PRIVATE KEY BLOCK-----", "Comment: backup of the signing key", "",
                       *(rand(64, B64) for _ in range(6)), "=" + rand(4, B64),
                       "-----END PGP PRIVATE KEY BLOCK-----"])
PUTTY = "\n".join(["PuTTY-User-Key-File-2: ssh-rsa", "Encryption: none", "Comment: rsa-key-20260101",
                   "Public-Lines: 2", rand(64, B64), rand(20, B64), "Private-Lines: 3", rand(64, B64),
                   rand(64, B64), rand(30, B64), "Private-MAC: " + rand(40, "0123456789abcdef")])
CUT_HEAD = "\n".join(["-----BEGIN OPENSSH PRIVATE KEY-----", *(rand(70, B64) for _ in range(4))])
CUT_TAIL = "\n".join([*(rand(64, B64) for _ in range(3)), rand(20, B64) + "==", "-----END RSA PRIVATE KEY-----"])

# (note, [(kind, credential), ...]): the note holds {0}, {1}, ... where the credentials go.
CASES: list[tuple[str, list[tuple[str, str]]]] = [
    ("# AWS\n\n`~/.aws/credentials` on the build box:\n\n```ini\n[default]\naws_access_key_id = {0}\n"
     "aws_secret_access_key = {1}\nregion = eu-west-1\n```\n",
     [("aws-access-key", AWS_ID), ("aws-secret-key", AWS_SECRET)]),
    ("## Upload script\n\n```python\nAWS_SECRET_ACCESS_KEY = \"{0}\"\ns3 = boto3.client(\"s3\")\n```\n",
     [("aws-secret-key", AWS_SECRET_2)]),
    ("Temporary creds from `sts assume-role`:\n\n    export AWS_ACCESS_KEY_ID={0}\n",
     [("aws-access-key", AWS_TEMP_ID)]),
    ("## Blob storage\n\n```\nDefaultEndpointsProtocol=https;AccountName=notesbackup;AccountKey={0};"
     "EndpointSuffix=core.windows.net\n```\n",
     [("azure-storage-key", AZURE_KEY)]),
    ("# servers.md\n\n- ci-runner-02: 10.0.4.12, deploy user `ci`\n- GitHub token for the mirror job: {0}\n"
     "- rotate every 90 days\n",
     [("github-token", GHP)]),
    ("Check the OAuth app:\n\n```sh\ncurl -H \"Authorization: token {0}\" https://api.github.com/user\n```\n",
     [("github-token", GHO)]),
    ("The app installation token printed by the action was `{0}` (expires in an hour).\n",
     [("github-token", GHS)]),
    ("Fine-grained PAT for the docs repo: {0}\n", [("github-token", GITHUB_PAT)]),
    ("```env\nGITLAB_URL=https://gitlab.example.com\nGITLAB_TOKEN={0}\n```\n", [("gitlab-token", GLPAT)]),
    ("Runner registration: `gitlab-runner register --registration-token {0}`\n",
     [("gitlab-token", GLRUNNER)]),
    ("# Slack bot\n\nBot token: {0}\nUser token (admin scopes!): {1}\n",
     [("slack-token", XOXB), ("slack-token", XOXP)]),
    ("Alerts go to #ops through the webhook {0} (set in Grafana).\n", [("slack-webhook", WEBHOOK)]),
    ("## Deploy key\n\n```\n{0}\n```\n\nAdded to the server's authorized_keys on 2026-03-02.\n",
     [("private-key", RSA_BLOCK)]),
    ("My laptop key, for the record:\n\n{0}\n", [("private-key", OPENSSH_BLOCK)]),
    ("```json\n{{\n  \"type\": \"service_account\",\n  \"project_id\": \"notes-prod\",\n"
     "  \"private_key\": \"{0}\\n\",\n  \"client_email\": \"sync@notes-prod.iam.gserviceaccount.com\"\n}}\n```\n",
     [("private-key", PKCS8_JSON)]),
    ("```yaml\ntls:\n  key: |\n" + "{0}\n  cert: tls.crt\n```\n",
     [("private-key", "\n".join("    " + line for line in EC_BLOCK.splitlines()).lstrip())]),
    ("Encrypted PKCS#8 export (passphrase in the password manager):\n\n{0}\n", [("private-key", PKCS8_ENCRYPTED)]),
    ("Signing key backup:\n\n```\n{0}\n```\n", [("private-key", PGP_BLOCK)]),
    ("PuTTY export of the bastion key (`bastion.ppk`):\n\n```\n{0}\n```\n", [("private-key", PUTTY)]),
    ("{0}\n\nThe rest of this key is in the next passage.\n", [("private-key", CUT_HEAD)]),
    ("{0}\n\nThat was the end of the old deploy key.\n", [("private-key", CUT_TAIL)]),
    ("Test the API by hand:\n\n```sh\ncurl -H \"Authorization: Bearer {0}\" https://api.internal/v1/notes\n```\n",
     [("jwt", JWT_1)]),
    ("Response of `/login`:\n\n```json\n{{\"access\": \"{0}\", \"expires_in\": 3600}}\n```\n", [("jwt", JWT_2)]),
    ("## Local setup\n\n```env\nDB_HOST=localhost\nDB_PASSWORD={0}\nDEBUG=1\n```\n",
     [("password", "Xk9#mP2vL8qw")]),
    ("```yaml\ndatabase:\n  user: notes\n  password: \"{0}\"\n  port: 5432\n```\n",
     [("password", "s3cr3t-Passw0rd!")]),
    ("```python\nconn = connect(host=\"db\", user=\"app\")\npassword = \"{0}\"\n```\n",
     [("password", "Tr0ub4dor&3")]),
    ("```python\napi_key = \"{0}\"\nclient = Client(api_key)\n```\n",
     [("api-key", "9f8e7d6c5b4a39281706f5e4d3c2b1a0")]),
    ("Django settings for staging:\n\n```python\nSECRET_KEY = '{0}'\nDEBUG = False\n```\n",
     [("secret", DJANGO)]),
    ("```sh\nexport HF_TOKEN={0}\nhuggingface-cli whoami\n```\n", [("token", HF)]),
    ("```yaml\noauth:\n  client_id: notes-cli\n  access_token: {0}\n```\n",
     [("token", "ya29.a0AfH6SMBx3kQ9Zp7LrT2vWc")]),
    ("Login form test: `https://staging.example.com/login?user=qa&password={0}&next=/`\n",
     [("password", "Qw3rty!9xZ")]),
    ("```yaml\nservices:\n  api:\n    environment:\n"
     "      DATABASE_URL: postgres://app_user:{0}@db.internal:5432/app\n```\n",
     [("connection-string", "Pg-Str0ng-Pass")]),
    ("Atlas: `mongodb+srv://admin:{0}@cluster0.abcde.mongodb.net/notes?retryWrites=true`\n",
     [("connection-string", "M0ng0P4ss2026")]),
    ("- cache: redis://:{0}@cache.internal:6379/0\n", [("connection-string", "R3d1sP4ssw0rd")]),
    ("```ini\n[db]\nurl = mysql://root:{0}@localhost/wiki\n```\n", [("connection-string", "My5qlR00t!")]),
    ("Mirror remote: `git remote add mirror https://deploy:{0}@git.example.com/notes.git`\n",
     [("connection-string", "Gh-D3ploy-2026")]),
    ("## Billing\n\nLive secret key: {0}\nRestricted key for the webhook worker: {1}\n",
     [("stripe-key", SK_LIVE), ("stripe-key", RK_LIVE)]),
    ("Twilio account {0}, API key {1}\n", [("twilio-key", TWILIO_SID), ("twilio-key", TWILIO_KEY)]),
    ("```sh\nexport OPENAI_API_KEY={0}\n```\n", [("openai-key", OPENAI)]),
    ("SendGrid key for the newsletter: {0}\n", [("sendgrid-key", SENDGRID)]),
    ("Mailchimp: {0}\n", [("mailchimp-key", MAILCHIMP)]),
    ("`.npmrc`:\n\n```\n//registry.npmjs.org/:_authToken={0}\n```\n", [("npm-token", NPM)]),
    ("```ini\n[pypi]\n  username = __token__\n  password = {0}\n```\n", [("pypi-token", PYPI)]),
    ("Discord bot: {0}\n", [("discord-token", DISCORD)]),
    ("Telegram bot for alerts: `{0}`\n", [("telegram-token", TELEGRAM)]),
    ("Square app secret: {0}\n", [("square-oauth-secret", SQUARE)]),
    ("Maps embed: `<script src=\"https://maps.googleapis.com/maps/api/js?key={0}\"></script>`\n",
     [("gcp-api-key", GCP)]),
    ("Claude key for the eval harness: {0}\n", [("anthropic-key", ANTHROPIC)]),
    ("```ini\n# wg0.conf\n[Interface]\nPrivateKey = {0}\nAddress = 10.8.0.2/24\n```\n",
     [("secret", WIREGUARD)]),
    ("```yaml\nkind: Secret\ndata:\n  username: YWRtaW4=\n  password: {0}\n```\n", [("password", K8S_PASSWORD)]),
    ("JDBC: `jdbc:mysql://db:3306/app?user=app&password={0}`\n", [("password", "Secr3t!Jdbc")]),
    ("```json\n{{\"username\": \"sync\", \"password\": \"{0}\"}}\n```\n", [("password", "abc123xyz!")]),
]

# Ordinary notes and command lines that look a little like credentials and must come back unchanged.
NEGATIVES = [
    "- Connect to a database:\n\n`mysql -u root -p`",
    "`mysql -u {{user}} -p{{password}} {{database}}`",
    "`mysqldump --user {{user}} --password {{password}} {{database}} > {{backup.sql}}`",
    "`psql --password=<password> -h localhost`",
    "```sh\nexport TOKEN=$(cat token.txt)\n```",
    "```yaml\nenv:\n  GITHUB_TOKEN: ${{ secrets.GITHUB_TOKEN }}\n```",
    "password: <your password>",
    "password: ${DB_PASSWORD}",
    "```python\npassword = os.environ[\"DB_PASSWORD\"]\ntoken = get_token()\n```",
    "api_key: YOUR_API_KEY",
    "PASSWORD=changeme",
    "password: \"********\"",
    "password: ...",
    "secret: xxxxxxxxxxxx",
    "`curl -u user:password https://example.com/api`",
    "`git clone https://{{username}}:{{password}}@github.com/{{user}}/{{repo}}.git`",
    "Local dev only: postgres://user:password@localhost/db",
    "Password: required for sudo, see the wiki.",
    "The secret: keep notes small and link them.",
    "commit 3f9c2a1b7e4d5f6a8b9c0d1e2f3a4b5c6d7e8f90 (HEAD -> main)",
    "request id 123e4567-e89b-12d3-a456-426614174000 failed",
    "digest: sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
    "![dot](data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAA"
    "ABJRU5ErkJggg==)",
    "`ssh-keygen -t ed25519 -C \"you@example.com\"`",
    "`gpg --export-secret-keys --armor {{key_id}} > private.asc`",
    "```\n-----BEGIN RSA PRIVATE KEY-----\n...\n-----END RSA PRIVATE KEY-----\n```",
    "`aws configure set aws_secret_access_key {{secret_key}}`",
    "AWS docs use AKIAIOSFODNN7EXAMPLE and wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY as examples.",
    "`export GITHUB_TOKEN=ghp_xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx`",
    "Stripe test mode keys start with sk_test_, live ones with sk_live_.",
    "`curl -H \"Authorization: Bearer <token>\" https://api.example.com`",
    "token: {{token}}",
    "password: \"{{ vault_db_password }}\"",
    "DB_PASSWORD=",
    "api_key = settings.API_KEY",
    "private_key: ~/.ssh/id_ed25519",
    "`ssh -i ~/.ssh/key.pem user@host`",
    "`docker login -u user -p \"$DOCKER_PASSWORD\" registry.example.com`",
    "```\npasswd: files systemd\ngroup: files systemd\n```",
    "pwd: /home/user/notes",
    "key: value",
    "password_min_length = 12",
    "`npm config set //registry.npmjs.org/:_authToken={{token}}`",
    "tokenizer: \"bert-base-uncased\"",
    "`openssl req -new -key {{private.key}} -out {{request.csr}}`",
    "Keyboard shortcuts: press the secret key combo Ctrl+Alt+K.",
    "See https://docs.example.com/auth#tokens and https://user@example.com/path.",
]


def filled(note: str, found: list[tuple[str, str]]) -> tuple[str, str]:
    """The note with its credentials, and as it must come back redacted."""
    return (note.format(*(secret for _, secret in found)),
            note.format(*(f"[redacted: {kind}]" for kind, _ in found)))


def test_the_corpus_is_large_enough():
    assert sum(len(found) for _, found in CASES) >= 40


@pytest.mark.parametrize("note,found", CASES, ids=[f"{i}-{f[0][0]}" for i, (_, f) in enumerate(CASES)])
def test_each_credential_is_replaced_by_its_kind_and_nothing_else_changes(note, found):
    text, expected = filled(note, found)
    out, kinds = redact(text)
    for _, secret in found:
        assert secret not in out
    assert out == expected
    assert kinds == [kind for kind, _ in found]
    assert credential_kinds(text) == kinds


@pytest.mark.parametrize("note,found", CASES, ids=[f"{i}-{f[0][0]}" for i, (_, f) in enumerate(CASES)])
def test_each_credential_line_passes_the_cheap_precheck(note, found):
    text, _ = filled(note, found)
    lines = text.split("\n")
    flagged = _candidates(text)
    for kind, secret in found:
        if kind == "private-key":
            continue  # blocks are found by their BEGIN / END lines, before the precheck
        line = next(i for i, line in enumerate(lines) if secret in line)
        assert line in flagged, (kind, lines[line])


@pytest.mark.parametrize("text", NEGATIVES)
def test_placeholders_and_ordinary_command_lines_are_left_alone(text):
    assert redact(text) == (text, [])
    assert credential_kinds(text) == []


def test_redacting_twice_is_redacting_once():
    for note, found in CASES:
        once, _ = redact(filled(note, found)[0])
        assert redact(once) == (once, [])


def test_text_without_credentials_comes_back_equal():
    text = "# Espresso\n\nGrind 18 g, 25 to 30 seconds.\r\nClean the group head weekly.\n\n" + "\n".join(NEGATIVES)
    assert redact(text) == (text, [])
    assert redact("") == ("", [])


def test_line_ends_and_positions_are_kept():
    text, expected = filled("a\r\npassword: \"{0}\"\r\nb\r\n", [("password", "Zx8#kLm2Qp")])
    assert redact(text)[0] == expected
    text, expected = filled("{0}\r\n\r\nafter\r\n", [("private-key", RSA_BLOCK.replace("\n", "\r\n"))])
    assert redact(text)[0] == expected


def test_a_note_of_many_credentials_is_redacted_in_order():
    notes = [filled(note, found) for note, found in CASES]
    text = "\n\n".join(t for t, _ in notes)
    out, kinds = redact(text)
    assert out == "\n\n".join(e for _, e in notes)
    assert kinds == [kind for _, found in CASES for kind, _ in found]


def test_many_threads_at_once_give_the_same_output():
    texts = [filled(note, found)[0] for note, found in CASES] * 4
    expected = [redact(t) for t in texts]
    start = threading.Barrier(8)

    def run(chunk: int) -> list:
        start.wait()
        return [redact(t) for t in texts[chunk::8]]

    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(run, range(8)))
    for chunk, got in enumerate(results):
        assert got == expected[chunk::8]


def test_importing_the_module_does_not_import_detect_secrets():
    code = "import sys, puremind.redact as r; r.redact('plain text'); print('detect_secrets' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"
