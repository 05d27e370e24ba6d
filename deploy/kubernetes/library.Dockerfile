# One tree of the task library as an image, for the chart's init containers
# (deploy/kubernetes/README.md). The base is the medgym image: the init
# container's check needs sh, find, sort, sed and sha256sum, and the layers
# are shared with the services. Build from the library root, once per tree:
#
#   h=$(sed -n 's/.*"hash": *"sha256:\([0-9a-f]*\)".*/\1/p' build/library/agent/AGENT_TREE.json)
#   docker build -f deploy/kubernetes/library.Dockerfile --build-arg BASE=$REGISTRY/medgym:1.2 \
#     --build-arg TREE=agent -t $REGISTRY/medgym-library:agent-$h build/library
#
# (TREE=verifier with verifier/VERIFIER_TREE.json for the other.) The tag is
# the tree's content hash, so an image names exactly one library version.
ARG BASE
FROM ${BASE}
ARG TREE
COPY ${TREE} /library/${TREE}
