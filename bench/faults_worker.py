"""A worker of bench/faults.py: attaches to its job (taking over from a killed predecessor) and
runs short rollout and train phases until the job ends. Every train release loomd acknowledged
is appended to ACKS as "job iteration" (flushed, so a kill -9 right after loses nothing it
wrote). Usage: faults_worker.py URL JOB_ID ACKS PHASE_S"""
import os
import sys
import time

import loom

url, job_id, acks, phase_s = sys.argv[1], int(sys.argv[2]), sys.argv[3], float(sys.argv[4])
out = open(acks, "a")
while True:
    try:
        job = loom.Job.attach(url, job_id, takeover=True)
        break
    except loom.LoomError:
        time.sleep(0.2)  # loomd restarting


@job.phase("rollout")
def rollout():
    time.sleep(phase_s)


@job.phase("train")
def train():
    time.sleep(phase_s)


while not job.done:
    try:
        rollout()
        it = job.iterations_done
        train()
        if job.iterations_done > it:  # the release was acknowledged
            out.write(f"{job_id} {job.iterations_done}\n")
            out.flush()
            os.fsync(out.fileno())
    except loom.Restarted:
        pass
    except loom.LoomError:
        time.sleep(0.2)  # loomd away (killed, restarting): ask again
