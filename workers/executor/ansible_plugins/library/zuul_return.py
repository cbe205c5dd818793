"""The documentation of ``zuul_return`` (``ansible-doc``); the work is ``action/zuul_return.py``.

Ansible runs the action plugin of the same name instead of this module, on
the executor, so this file only says what the task takes. It is never sent
to a host.
"""

from __future__ import annotations

DOCUMENTATION = """
    module: zuul_return
    short_description: Return data to Sluice (Zuul's zuul_return)
    description:
        - Merges an object into the build's result data (the file named by
          SLUICE_RESULT_FILE), on the executor, whatever host the task targets.
        - Later calls update earlier ones; nested objects are merged.
        - "C(zuul: {pause: true}) pauses the build after run; C(zuul: {retry: false})
          makes a failed pre-run FAILURE instead of RETRY."
    options:
        data:
            description: The object to merge into the result data.
            type: dict
        file:
            description:
                - A JSON file on the executor holding an object to merge,
                  before O(data); relative to the project checkout.
            type: str
"""

EXAMPLES = """
- name: tell dependent jobs where the image is
  zuul_return:
    data:
      image: registry.example.org/app:1.2
      zuul:
        pause: true
"""

RETURN = """
"""
