"""Secrets in the runner: decrypted with the project key, given only to their steps, masked.

Real scripts in real git repositories and a real RSA key pair
(:mod:`scheduler.crypto`); no ZooKeeper: the key is handed to
:func:`decrypt_secrets` directly (the keystore is tested in tests/zk).
"""

from __future__ import annotations

import json
import stat
from dataclasses import replace
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.rsa import RSAPrivateKey

from scheduler import crypto
from scheduler.crypto import ENCRYPTED
from scheduler.wire.build_spec import BuildSpec
from tests.executor.helpers import Repo, make_spec, playbook
from workers.executor import BaseControl, Result, RunnerOptions, run_build
from workers.executor.secrets import MASK, SecretError, decrypt_secrets

PASSWORD = "correct horse battery staple"
KEY = "org/project@main:creds"


@pytest.fixture(scope="module")
def key() -> RSAPrivateKey:
    return crypto.generate_private_key(2048)


def encrypted(key: RSAPrivateKey, text: str) -> dict[str, list[str]]:
    return {ENCRYPTED: crypto.encrypt_pkcs1_oaep(crypto.public_pem(key), text.encode())}


def secret_spec(repo: Repo, key: RSAPrivateKey, **fields: object) -> BuildSpec:
    data = {"user": "deployer", "password": encrypted(key, PASSWORD)}
    secret = {"connection": "git", "project": "org/project", "name": "creds", "data": data}
    return make_spec(
        repo,
        repo.commit(),
        pre_run=("pre.sh",),
        run=(playbook("run.sh", secrets=(("site", KEY),)),),
        secrets={KEY: secret},
        **fields,
    )


def test_a_step_gets_its_secrets_in_a_private_file_and_the_log_masks_them(
    repo: Repo, options: RunnerOptions, key: RSAPrivateKey
) -> None:
    repo.script("pre.sh", 'echo "pre sees: ${SLUICE_SECRETS_FILE:-nothing}"')
    repo.script(
        "run.sh",
        'stat -c %a "$SLUICE_SECRETS_FILE" > "$SLUICE_LOG_DIR/mode"\n'
        'cp "$SLUICE_SECRETS_FILE" "$SLUICE_LOG_DIR/seen.json"\n'
        'echo "$SLUICE_SECRETS_FILE" > "$SLUICE_LOG_DIR/where"\n'
        "echo \"the password is $(python3 -c 'import json,os; "
        'print(json.load(open(os.environ["SLUICE_SECRETS_FILE"]))["site"]["password"])\')"\n'
        'echo "{\\"leak\\": \\"$(cat $SLUICE_LOG_DIR/seen.json | tr -d \\"\\\\\\"\\")\\"}" '
        '> "$SLUICE_RESULT_FILE"',
    )
    spec = secret_spec(repo, key)
    plain = decrypt_secrets(spec, lambda connection, project: key)

    result = run_build(spec, BaseControl(), options, plain)

    assert result.result is Result.SUCCESS, result.message
    logs = Path(result.log_path).parent
    seen = json.loads((logs / "seen.json").read_text())
    assert seen == {"site": {"user": "deployer", "password": PASSWORD}}
    assert (logs / "mode").read_text().strip() == "600"
    assert not Path((logs / "where").read_text().strip()).exists(), "removed after the step"
    output = Path(result.log_path).read_text()
    assert "pre sees: nothing" in output, "the base pre-run does not see the secret"
    assert f"the password is {MASK}" in output
    assert PASSWORD not in output
    assert MASK in json.dumps(result.result_data), result.result_data
    assert PASSWORD not in json.dumps(result.to_dict()), "masked in the result data too"


def test_a_secret_that_does_not_decrypt_is_a_clear_error(repo: Repo, key: RSAPrivateKey) -> None:
    spec = secret_spec(repo, key)
    other = crypto.generate_private_key(2048)
    with pytest.raises(SecretError, match="secret 'creds' cannot be decrypted"):
        decrypt_secrets(spec, lambda connection, project: other)


def test_the_secrets_folder_is_private(
    repo: Repo, options: RunnerOptions, key: RSAPrivateKey
) -> None:
    repo.script("pre.sh", "true")
    repo.script("run.sh", 'stat -c %a "$(dirname "$SLUICE_SECRETS_FILE")" > "$SLUICE_LOG_DIR/dir"')
    spec = secret_spec(repo, key)
    result = run_build(spec, BaseControl(), options, decrypt_secrets(spec, lambda c, p: key))
    assert result.result is Result.SUCCESS, result.message
    mode = (Path(result.log_path).parent / "dir").read_text().strip()
    assert stat.S_IMODE(int(mode, 8)) == 0o700


def test_a_sandboxed_step_reads_its_secrets_file(
    repo: Repo, options: RunnerOptions, key: RSAPrivateKey
) -> None:
    repo.script("pre.sh", "true")
    repo.script(
        "run.sh",
        'grep -q deployer "$SLUICE_SECRETS_FILE" && echo "seen: $(wc -c < "$SLUICE_SECRETS_FILE")"',
    )
    spec = secret_spec(repo, key)
    sandboxed = replace(options, sandbox="bwrap")
    result = run_build(spec, BaseControl(), sandboxed, decrypt_secrets(spec, lambda c, p: key))
    assert result.result is Result.SUCCESS, (result.message, result.log_tail)
    assert "seen: " in Path(result.log_path).read_text()
