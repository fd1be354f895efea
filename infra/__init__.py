"""The CDK app (infra/app.py) and its constructs."""

import os

# jsii (the CDK's Python runtime) prints a Node 20 end-of-life banner as byte strings on every
# `cdk synth`; the Makefile silenced it only for make. Node 20 is the Node this project sets up and
# documents (README), so a bare `npx cdk …` is silenced here too; another Node still warns.
os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "20")
