"""A PyTorch worker program for python_torch_metrics_test.py: trains a few
steps reporting its loss, then scrapes its own metrics port (the one the
launcher gave it) and reports the text.
"""

import os
import sys
import urllib.request

import torch
import torch.nn as nn

import paramserver.torch as ps
from python_launch import report

STEPS, BATCH = 5, 8


def main():
    torch.set_num_threads(1)
    ps.init()
    model = nn.Linear(4, 2)
    opt = ps.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                  named_parameters=model.named_parameters(),
                                  placement=sys.argv[1])
    opt.num_examples = BATCH
    x = torch.randn(STEPS * BATCH, 4,
                    generator=torch.Generator().manual_seed(ps.rank()))
    for step in range(STEPS):
        opt.zero_grad()
        loss = model(x[step * BATCH:(step + 1) * BATCH]).square().mean()
        loss.backward()
        opt.step()
        ps.report_loss(loss)
    port = os.environ["PS_METRICS_PORT"]
    with urllib.request.urlopen("http://127.0.0.1:%s/metrics" % port,
                                timeout=60) as response:
        text = response.read().decode()
    report({"port": int(port), "loss": loss.item(), "metrics": text})
    ps.shutdown()


if __name__ == "__main__":
    main()
