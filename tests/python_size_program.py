"""A worker that names the servers and its rank itself, as a user without
the launcher does: ps.init(servers=[...], rank=R), with none of the
launcher's size variables. Reports "RESULT {json}": what size() said
before the declaration, and after it."""

import json
import os

import torch

import paramserver.torch as ps


def main():
    servers = os.environ["PS_SERVERS"].split(",")
    rank = int(os.environ["PS_RANK"])
    for name in ("PS_NUM_WORKERS", "WORLD_SIZE", "PS_LOCAL_NUM_WORKERS",
                 "LOCAL_WORLD_SIZE"):
        os.environ.pop(name, None)
    ps.init(servers=servers, rank=rank, job_id=os.environ.get("PS_JOB_ID"))
    before = None
    try:
        ps.size()
    except ValueError as error:
        before = str(error)
    torch.manual_seed(1)
    model = torch.nn.Linear(2, 1)
    opt = ps.DistributedOptimizer(
        torch.optim.SGD(model.parameters(), lr=0.1),
        named_parameters=model.named_parameters())
    opt.zero_grad()
    model(torch.ones(4, 2)).sum().backward()
    opt.step()
    print("RESULT " + json.dumps({"before": before, "size": ps.size()}),
          flush=True)
    ps.shutdown()


if __name__ == "__main__":
    main()
