"""One table of member names and string values, read by the gateway's masker tests and by the
tests of the OPA decision-log mask policy: the two must decide every row alike."""

from __future__ import annotations

from typing import Final

#: Names whose values are masked: the credential class in every spelling style.
SENSITIVE_NAMES: Final = (
    # written in clear by exact-name matching
    "db_password",
    "auth_token",
    "X-API-Key",
    "github_token",
    "aws_secret_access_key",
    "session_token",
    "secret_key",
    "private_key_pem",
    "credentials",
    "cookie",
    "bearer",
    # the same class, other spellings and styles
    "dbPassword",
    "DbPassword",
    "DB_PASSWORD",
    "db-password",
    "db.password",
    "db password",
    "DB__PASSWORD__",
    "dbpassword",
    "passwd",
    "user_pwd",
    "pass",
    "pw",
    "passPhrase",
    "passcode",
    "xApiKey",
    "XAPIKey",
    "x.api.key",
    "x-api-keys",
    "apikey",
    "API_KEY_2",
    "authToken",
    "AUTH.TOKEN",
    "accessToken",
    "refresh-token",
    "id_token",
    "oauth2Token",
    "csrftoken",
    "GITHUB_PAT",
    "AWS_ACCESS_KEY_ID",
    "secretAccessKey",
    "clientSecret",
    "client_secret",
    "secrets",
    "sessionId",
    "SESSION",
    "Set-Cookie",
    "cookies",
    "Authorization",
    "Proxy-Authorization",
    "authorisation",
    "auth",
    "x-auth",
    "privateKey",
    "ssh_private_key",
    "tls.key",
    "signingKey",
    "signing_keys",
    "encryption-key",
    "master_key",
    "hmacKey",
    "key_pem",
    "cert.pem",
    "keystore",
    "credential",
    "userCredentials",
    "creds",
    "signature",
    "X-Hub-Signature-256",
    "sig",
    "jwt",
    "idJwt",
    "otp",
    "mfa_code",
    "pin",
    "card_number",
    "cardNumber",
    "creditCard",
    "cvv2",
    "ssn",
    "dsn",
    "connectionString",
    "conn_str",
    # deliberately masked although often harmless: masking errs on the safe side
    "max_tokens",
    "token_count",
    "tokenizer",
    "private",
    "secretary",
)

#: Names whose values stay in clear.
INNOCENT_NAMES: Final = (
    "query",
    "path",
    "url",
    "subject",
    "tenant",
    "roles",
    "name",
    "keyword",
    "keywords",
    "monkey",
    "key",
    "keys",
    "primary_key",
    "sort_key",
    "partition_key",
    "public_key",
    "author",
    "authority",
    "passenger",
    "compass",
    "bypass",
    "amount",
    "description",
    "",
    "__",
    "日本",
)

#: Strings masked whatever their member name: they carry the shape of a credential.
SECRET_VALUES: Final = (
    "Bearer abcdefghij",
    "bearer\tabcdefghij.klm",
    'curl -H "Authorization: Basic dXNlcjpwYXNz" https://api.example.com',
    "authorization=xyz",
    "host=db user=app password=hunter2",
    '{"api_key": "k-123"}',
    "token: abc",
    "Cookie=sid",
    "-----BEGIN RSA PRIVATE KEY-----\nMIIEow==\n-----END RSA PRIVATE KEY-----",
    "-----BEGIN OPENSSH PRIVATE KEY-----",
    "-----BEGIN PRIVATE KEY-----",
    "-----BEGIN PGP PRIVATE KEY BLOCK-----",
    "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dGhpcyBpcyBub3QgYSBzaWc",
    "the token is eyJhbGciOiJub25lIn0.eyJzdWIiOiJ4In0.",
    "postgres://app:hunter2@db.internal:5432/app",
    "https://user:pa%40ss@example.com/x",
    "AKIAIOSFODNN7EXAMPLE",
    "ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8",
    "github_pat_" + "11ABCDEFG0123456789abc",
    "xoxb-" + "1234567890-abcdef",
    "sk-" + "proj-abcdefghijklmnopqrstuvwx",
    "sk_live_" + "abcdefghijklmnop1234",
    "glpat-" + "abcdefghij0123456789",
    "AIza" + "SyA-abcdefghijklmnopqrstuvwxyz012345",
)

#: Strings that stay in clear.
PLAIN_VALUES: Final = (
    "",
    "hello world",
    "an ordinary sentence about tokens and passwords",
    "https://example.com/a/b?c=d",
    "mailto:alice@example.com",
    "select * from accounts where tenant = 'acme'",
    "/srv/tenants/acme/report.txt",
    "task-list-aaaaaaaaaaaaaaaaaaaaaaaaa",
    "eyJ",
    "Bearer short",
    "-----BEGIN CERTIFICATE-----",
    "-----BEGIN PUBLIC KEY-----",
    "masked:0123456789abcdef01234567",
)

#: Credential names written in compatibility forms: full-width, circled, mathematical and
#: modifier letters, the long s, the Kelvin sign, the sharp s, dotted and dotless i, accents
#: and invisible characters inside a word. The gateway's masker masks each one; the OPA mask
#: policy matches names as they are written, so its tests do not read this table.
COMPATIBLE_NAMES: Final = (
    "\uff50\uff41\uff53\uff53\uff57\uff4f\uff52\uff44",  # full-width password
    "\uff24\uff22\uff3f\uff30\uff21\uff33\uff33\uff37\uff2f\uff32\uff24",  # DB_PASSWORD
    "\uff44\uff42\uff30\uff41\uff53\uff53\uff57\uff4f\uff52\uff44",  # dbPassword
    "\uff55\uff53\uff45\uff52\uff30\uff49\uff4e",  # userPin: a whole word, found by its capital
    "\uff41\uff50\uff49\uff2b\uff45\uff59",  # apiKey
    "\uff53\uff45\uff53\uff53\uff49\uff4f\uff4e\uff29\uff44",  # sessionId
    "pa\u017fsword",  # long s
    "\u017fecret_value",
    "GITHUB_TO\u212aEN",  # Kelvin sign
    "x_api\u212aey",
    "pa\u00dfword",  # sharp s
    "DB_PA\u1e9eWORD",  # capital sharp s
    "xAUTHOR\u0130ZATION",  # dotted capital I
    "sess\u0131on_id",  # dotless i
    "credent\u0131als",
    "\u24df\u24d0\u24e2\u24e2\u24e6\u24de\u24e1\u24d3",  # circled password
    "\U0001d42c\U0001d41e\U0001d41c\U0001d42b\U0001d41e\U0001d42d",  # mathematical bold secret
    "\u1d57\u1d52\u1d4f\u1d49\u207f",  # modifier letters: token
    "p\u00e4ssw\u00f6rd",  # accents
    "dbpa\u0301ssword",  # a combining accent
    "github_to\u200bken",  # zero-width space
    "client_se\u00adcret_id",  # soft hyphen
    "dbpa\u2060ssword",  # word joiner
    "coo\ufeffkie_jar",  # byte order mark
    "au\u200dth",  # zero-width joiner, inside a whole word
)

#: Names in compatibility forms whose values stay in clear.
COMPATIBLE_INNOCENT_NAMES: Final = (
    "\uff51\uff55\uff45\uff52\uff59",  # full-width query
    "\uff4b\uff45\uff59",  # key
    "\uff4d\uff4f\uff4e\uff4b\uff45\uff59",  # monkey
    "\uff50\uff41\uff53\uff53\uff45\uff4e\uff47\uff45\uff52",  # passenger
    "by\u017fpa\u017f\u017f",  # "byspass": no word of a credential
    "contrase\u00f1a",
    "\u65e5\u672c\u8a9e",
    "\u00fcberpr\u00fcfung",
)
