# Copy one tree of the task library ($TREE: agent or verifier) from this image
# (/library/$TREE) into the pod (/mnt/library/$TREE), after checking its
# content hash: the sha256 of "<file sha256>  <path>" lines in path order, as
# tasks.WriteManifests computes it and the manifest records it. ONLY, if set,
# copies that one file of the tree (the agent manifest for the verifier).
src=/library/$TREE
case $TREE in
  agent) manifest=AGENT_TREE.json ;;
  verifier) manifest=VERIFIER_TREE.json ;;
  *) echo "library-init: unknown tree $TREE" >&2; exit 2 ;;
esac
recorded=$(sed -n 's/^ *"hash": *"\(sha256:[0-9a-f]*\)".*/\1/p' "$src/$manifest")
if [ "$recorded" != "$WANT_HASH" ]; then
  echo "library-init: the $TREE tree in this image is $recorded, the release wants $WANT_HASH" >&2
  exit 1
fi
got=sha256:$(cd "$src" && find . -type f ! -name AGENT_TREE.json ! -name VERIFIER_TREE.json \
  | sed 's|^\./||' | LC_ALL=C sort | while IFS= read -r f; do sha256sum "$f"; done | sha256sum | cut -d' ' -f1)
if [ "$got" != "$WANT_HASH" ]; then
  echo "library-init: the $TREE tree's files hash to $got, its manifest says $WANT_HASH" >&2
  exit 1
fi
mkdir -p "/mnt/library/$TREE"
if [ -n "$ONLY" ]; then
  cp "$src/$ONLY" "/mnt/library/$TREE/$ONLY"
else
  cp -R "$src/." "/mnt/library/$TREE/"
fi
echo "library-init: $TREE tree $got"
