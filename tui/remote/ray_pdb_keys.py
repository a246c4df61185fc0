"""verl-tui legacy-breakpoint lister, run ON the head with its Ray interpreter:
``PYTHON -u -c SOURCE GCS_ADDRESS``.

Ray's own GCS client, no ``ray.init`` (which would register a driver job and take seconds).
Prints one JSON object ``{"breakpoints": [...]}``: the ``RAY_PDB_*`` records of the ``ray_pdb``
KV namespace that belong to live jobs, each with its key and the job's submission id. Keys of
dead jobs are deleted, as ``ray debug`` does, so they do not pile up. The one program here
that imports Ray (it only runs where Ray is: the head); no imports from ``tui``.
"""

import sys

if __name__ == "__main__":
    # `-c` puts the working directory first on sys.path: a stray json.py must not win.
    sys.path[:] = [p for p in sys.path if p not in ("", ".")]

import json


def main(address):
    from ray._raylet import GcsClient  # the head's Ray; imported only when run there

    gcs = GcsClient(address=address)
    ns = b"ray_pdb"
    jobs = {}
    for info in gcs.get_all_job_info(
        skip_submission_job_info_field=True, skip_is_running_tasks_field=True
    ).values():
        meta = dict(info.config.metadata)
        jobs[info.job_id.hex()] = {
            "alive": not info.is_dead,
            "submission_id": meta.get("job_submission_id"),
        }
    out = []
    for key in gcs.internal_kv_keys(b"RAY_PDB_", namespace=ns):
        raw = gcs.internal_kv_get(key, namespace=ns)
        if raw is None:
            continue
        try:
            rec = json.loads(raw)
        except ValueError:
            continue
        job = jobs.get(rec.get("job_id"))
        if job is None or not job["alive"]:
            gcs.internal_kv_del(key, False, namespace=ns)
            continue
        rec["key"] = key.decode()
        rec["submission_id"] = job["submission_id"]
        out.append(rec)
    print(json.dumps({"breakpoints": out}))


if __name__ == "__main__":
    main(sys.argv[1])
