import sys, json, io, os, contextlib, tempfile, traceback
lib, dataset, split, out = sys.argv[1:5]
os.environ["MEDGYM_DATA_DIR"] = os.path.join(lib, "agent", dataset)
res = []
with open(os.path.join(lib, "verifier", dataset, split + ".jsonl")) as f:
    tasks = [json.loads(l) for l in f]
for t in tasks:
    d = tempfile.mkdtemp()
    os.chdir(d)
    buf = io.StringIO()
    ok = True
    try:
        with contextlib.redirect_stdout(buf):
            exec(compile(t["reference"], "<ref>", "exec"), {"__name__": "__main__"})
    except BaseException as e:
        ok = False
        buf.write("\n" + traceback.format_exc())
    files = {}
    for name in t["view"].get("output_files") or []:
        p = os.path.join(d, name)
        if os.path.exists(p):
            files[name] = open(p).read()
    res.append({"id": t["view"]["id"], "ok": ok, "stdout": buf.getvalue(), "files": files})
with open(out, "w") as f:
    for r in res:
        f.write(json.dumps(r) + "\n")
print(dataset, split, len(res))
