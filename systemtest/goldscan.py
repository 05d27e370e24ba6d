# goldscan: search a file tree for the held-out (gold) rows of prediction
# tasks. TestGoldRowsUnreachable runs it inside a real sandbox over "/" and,
# as its positive controls, on the host over planted copies and over the
# host's unmasked /usr.
#
#   python3 goldscan.py FINGERPRINTS.json ROOT...
#
# FINGERPRINTS.json (written by the test from a generated task library):
#   {"tasks": [{"task": KEY, "rows": [{"f": [RAW FEATURE VALUES], "y": LABEL}], "doubles": [FLOAT...]}]}
# rows: gold test rows whose feature tuple is not also a training row;
# doubles: non-integer feature values of the gold rows found nowhere in the
# training file.
#
# It prints one JSON document: {"hits": [...], "flagged": [...], "files": N,
# "read_bytes": B, "seconds": S}. A hit is a file (or a member of a
# compressed file or archive: "PATH!MEMBER") that holds a quarter or more of
# a task's gold rows as text lines (every feature value of the row on one
# line, in any order and number format, 4 significant digits) or half or
# more of its gold doubles as raw IEEE-754 values (big- or little-endian, at
# any offset: R's XDR data bases, numpy and pickle files). "labelled" says
# whether a column of the matched lines determines the gold label (the label
# itself, in any coding). "flagged" lists files whose names say "data set"
# (R data, numpy, pickle, parquet...) whatever their content, for the
# report. Files over the size limit are listed in "skipped".
import bz2, collections, gzip, io, json, lzma, os, re, sys, time, zipfile, zlib

MAX_FILE = 64 << 20          # bytes read of one file
MAX_INFLATE = 256 << 20      # bytes inflated from one compressed stream
SNIFF = 4096
DATA_EXT = (".csv", ".tsv", ".tab", ".dat", ".data", ".txt", ".arff", ".json", ".asc", ".gz", ".bz2", ".xz",
            ".zip", ".npz", ".npy", ".pkl", ".pickle", ".rda", ".rdata", ".rds", ".rdb", ".sav", ".dta",
            ".mat", ".h5", ".hdf5", ".feather", ".parquet", ".arrow", ".xls", ".xlsx", ".sas7bdat")
NAMED_DATA = (".npz", ".npy", ".pkl", ".pickle", ".rda", ".rdata", ".rds", ".rdb", ".sav", ".dta", ".mat",
              ".h5", ".hdf5", ".feather", ".parquet", ".arrow", ".xls", ".xlsx", ".sas7bdat")
# Never read: binaries, images, fonts, and source code and markup (a data
# set in a package is a data file; code with numbers in it is not one).
NEVER = (".so", ".pyc", ".a", ".o", ".png", ".jpg", ".jpeg", ".gif", ".ico", ".mo", ".ttf", ".otf", ".woff",
         ".woff2", ".pdf", ".svgz", ".jar", ".class", ".h", ".hh", ".hpp", ".hxx", ".ipp", ".tcc", ".inc", ".c",
         ".cc", ".cpp", ".go", ".s", ".java", ".js", ".ts", ".vim", ".pm", ".pl", ".rb", ".el", ".lua", ".tcl",
         ".sh", ".mk", ".cmake", ".def", ".xml", ".html", ".htm", ".md", ".rst", ".afm", ".hwdb", ".po", ".pot",
         ".css", ".svg", ".sym")
# Never read: manual pages and change logs.
NEVER_PARTS = ("/share/man/", "/changelog")
# Numbers are found at C speed: every byte that cannot be part of one
# becomes a space (newlines stay), and the rest splits into tokens; canon
# drops those that are not numbers.
_keep = set(b"0123456789.eE+-\n")
NUMBYTES = bytes(b if b in _keep else 0x20 for b in range(256))


def numbers(b):
    return b.translate(NUMBYTES).split()


# The sniff counts runs of digits only (no signs, exponents or letters).
DIGITBYTES = bytes(b if b in set(b"0123456789\n") else 0x20 for b in range(256))

SPLIT = re.compile(rb"[,;\t| ]+")

try:
    import numpy as np
except Exception:  # the binary search needs numpy; the text search does not
    np = None


def canon(tok):
    try:
        v = float(tok)
    except ValueError:
        return None
    if v != v or v in (float("inf"), float("-inf")):
        return None
    s = "%.4g" % v
    return "0" if s == "-0" else s


def field(tok):
    tok = tok.strip(b"\"'")
    c = canon(tok)
    return c if c is not None else tok.decode("latin-1").lower()


class Prints:
    def __init__(self, doc):
        self.tasks = doc["tasks"]
        freq = collections.Counter()
        self.rows = []  # (task index, canon feature Counter, label, feature set)
        for ti, t in enumerate(self.tasks):
            for r in t.get("rows") or []:
                fs = [canon(str(v)) for v in r["f"]]
                if any(f is None for f in fs):
                    continue
                self.rows.append((ti, collections.Counter(fs), str(r["y"]), frozenset(fs)))
                freq.update(set(fs))
        self.index = collections.defaultdict(list)
        for ri, (_, fs, _, _) in enumerate(self.rows):
            anchor = min(fs, key=lambda f: (freq[f], f))
            self.index[anchor].append(ri)
        self.nrows = collections.Counter(r[0] for r in self.rows)
        self.need = {ti: max(10, n / 4) for ti, n in self.nrows.items()}
        self.doubles = []
        if np is not None:
            for t in self.tasks:
                self.doubles.append(np.unique(np.array(t.get("doubles") or [], dtype=np.float64)))


def text_hits(p, blob):
    """Tasks a quarter of whose gold rows are lines of blob."""
    if not maybe_text_hit(p, blob):
        return []
    matched = collections.defaultdict(dict)  # task -> row -> fields
    for line in blob.splitlines():
        if len(line) > 100000:
            continue
        nums = numbers(line)
        if len(nums) < 2:
            continue
        have = None
        seen = set()
        for tok in nums:
            c = canon(tok)
            if c is None or c in seen or c not in p.index:
                continue
            seen.add(c)
            for ri in p.index[c]:
                ti, fs, _, _ = p.rows[ri]
                if ri in matched[ti]:
                    continue
                if have is None:
                    have = collections.Counter(x for x in (canon(t) for t in nums) if x is not None)
                if all(have[f] >= n for f, n in fs.items()):
                    matched[ti][ri] = [field(x) for x in SPLIT.split(line.strip()) if x]
    out = []
    for ti, rows in matched.items():
        n = p.nrows[ti]
        if len(rows) >= p.need[ti]:
            out.append({"task": p.tasks[ti]["task"], "rows": len(rows), "of": n, "how": "text",
                        "labelled": labelled(p, rows)})
    return out


def maybe_text_hit(p, blob):
    """Whether enough gold rows of a task have all their values somewhere in
    blob (a cheap test at C speed before the line by line one)."""
    toks = set()
    for t in set(numbers(blob)):
        c = canon(t)
        if c is not None:
            toks.add(c)
    per = collections.Counter()
    for a in toks.intersection(p.index):
        for ri in p.index[a]:
            row = p.rows[ri]
            if row[3] <= toks:
                per[row[0]] += 1
                if per[row[0]] >= p.need[row[0]]:
                    return True
    return False


def labelled(p, rows):
    """Whether one column of the matched lines determines the gold label."""
    width = collections.Counter(len(f) for f in rows.values()).most_common(1)[0][0]
    lines = [(p.rows[ri][2], f) for ri, f in rows.items() if len(f) == width]
    if len({y for y, _ in lines}) < 2:
        return False
    for j in range(width):
        m = {}
        ok = True
        for y, f in lines:
            if m.setdefault(f[j], y) != y:
                ok = False
                break
        if ok and 2 <= len(m) <= 10:
            return True
    return False


def binary_hits(p, blob):
    """Tasks half of whose gold doubles are raw IEEE-754 values in blob."""
    if np is None or len(blob) < 8:
        return []
    found = [np.zeros(len(d), dtype=bool) for d in p.doubles]
    for order in (">f8", "<f8"):
        for off in range(8):
            n = (len(blob) - off) // 8
            if n <= 0:
                continue
            vals = np.unique(np.frombuffer(blob, dtype=order, count=n, offset=off).astype(np.float64))
            for ti, d in enumerate(p.doubles):
                if len(d):
                    idx = np.clip(np.searchsorted(vals, d), 0, len(vals) - 1)
                    found[ti] |= vals[idx] == d
    out = []
    for ti, d in enumerate(p.doubles):
        if len(d) >= 10 and found[ti].sum() >= len(d) / 2:
            out.append({"task": p.tasks[ti]["task"], "values": int(found[ti].sum()), "of": len(d),
                        "how": "binary", "labelled": None})
    return out


def inflate_one(blob):
    """The decompressed bytes of blob when it is a gzip, bzip2 or xz stream."""
    for magic, mod in ((b"\x1f\x8b", gzip), (b"BZh", bz2), (b"\xfd7zXZ", lzma)):
        if blob.startswith(magic):
            try:
                if mod is gzip:
                    d = zlib.decompressobj(16 + zlib.MAX_WBITS)
                    return d.decompress(blob, MAX_INFLATE)
                if mod is bz2:
                    return bz2.BZ2Decompressor().decompress(blob, MAX_INFLATE)
                return lzma.LZMADecompressor().decompress(blob, MAX_INFLATE)
            except Exception:
                return None
    return None


def rdb_chunks(blob):
    """The objects of an R lazy-load data base (Rdata.rdb): each a 4-byte
    length, an optional compression type byte, and a zlib, bzip2 or xz stream."""
    pos, out = 0, []
    while pos + 5 < len(blob) and len(out) < 10000:
        start = pos + 4
        kind = blob[start:start + 1]
        if kind in (b"Z", b"2", b"X", b"0"):
            start += 1
        rest = blob[start:]
        try:
            if kind == b"2":
                d = bz2.BZ2Decompressor()
            elif kind == b"X":
                d = lzma.LZMADecompressor()
            elif kind == b"0":
                n = int.from_bytes(blob[pos:pos + 4], "big")
                out.append(rest[:n])
                pos = start + n
                continue
            else:
                d = zlib.decompressobj()
            out.append(d.decompress(rest, MAX_INFLATE))
            pos = len(blob) - len(d.unused_data)
        except Exception:
            break
        if pos <= start:
            break
    return out


def blobs(name, blob, depth=0):
    """(member name, bytes) of a file: itself, what it inflates to, its
    archive members and R data base objects."""
    inner = inflate_one(blob) if depth <= 2 else None
    if inner is not None:
        yield from blobs(name + "!inflated", inner, depth + 1)
    elif depth <= 2 and blob.startswith(b"PK\x03\x04"):
        try:
            with zipfile.ZipFile(io.BytesIO(blob)) as z:
                for info in z.infolist()[:1000]:
                    if info.file_size <= MAX_INFLATE:
                        yield from blobs(name + "!" + info.filename, z.read(info), depth + 1)
        except Exception:
            pass
    elif depth <= 2 and name.lower().endswith(".rdb"):
        for i, c in enumerate(rdb_chunks(blob)):
            yield from blobs("%s!%d" % (name, i), c, depth + 1)
    else:
        yield name, blob


def tabular(head):
    if b"\0" in head:
        return False
    return sum(1 for line in head.translate(DIGITBYTES).split(b"\n") if len(line.split()) >= 2) >= 5


def scan(p, roots, skip):
    res = {"hits": [], "flagged": [], "skipped": [], "files": 0, "read_bytes": 0}
    t0 = time.time()
    for root in roots:
        for top, dirs, files in os.walk(root):
            if top == "/":
                dirs[:] = [d for d in dirs if d not in ("proc", "sys", "dev")]
            for f in files:
                path = os.path.join(top, f)
                low = f.lower()
                if path in skip or low.endswith(NEVER) or ".so." in low or any(x in path for x in NEVER_PARTS):
                    continue
                try:
                    st = os.stat(path, follow_symlinks=False)
                    if not os.path.isfile(path) or os.path.islink(path):
                        continue
                    if low.endswith(NAMED_DATA):
                        res["flagged"].append(path)
                    with open(path, "rb") as fh:
                        head = fh.read(SNIFF)
                        if not (low.endswith(DATA_EXT) or head.startswith((b"\x1f\x8b", b"BZh", b"\xfd7zXZ", b"PK\x03\x04"))
                                or tabular(head)):
                            continue
                        if st.st_size > MAX_FILE:
                            res["skipped"].append(path)
                            continue
                        blob = head + fh.read()
                except OSError:
                    continue
                res["files"] += 1
                res["read_bytes"] += len(blob)
                for name, b in blobs(path, blob):
                    hits = text_hits(p, b) if b"\0" not in b[:8192] else binary_hits(p, b)
                    for h in hits:
                        h["path"] = name
                        res["hits"].append(h)
    res["seconds"] = round(time.time() - t0, 2)
    res["cpu_seconds"] = round(time.process_time(), 2)
    return res


def main():
    with open(sys.argv[1], "rb") as fh:
        p = Prints(json.load(fh))
    roots = sys.argv[2:] or ["/"]
    print(json.dumps(scan(p, roots, {os.path.abspath(sys.argv[1])})))


if __name__ == "__main__":
    main()
