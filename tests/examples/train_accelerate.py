"""An `accelerate` loop with geotrain_loop (recipes/README.md "Your own loop"): join the group before
Accelerator(), prepare the optimizer and data but not the model (a prepared model is wrapped in DDP,
which would all-reduce every step), and loop.step() after accelerator.backward(loss).

    geotrain workspaces deploy custom-training --workers 2 --workdir tests/examples --command "python train_accelerate.py"
"""

import torch, geotrain_loop
from accelerate import Accelerator

geotrain_loop.join()
accelerator = Accelerator(cpu=True)
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
data = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(4096, 32)), batch_size=64)
optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
optimizer, data = accelerator.prepare(optimizer, data)
loop = geotrain_loop.Loop(model, optimizer, "medium", steps=len(data))
for (x,) in data:
    loss = (model(x) - x.sum(1, keepdim=True)).pow(2).mean()
    accelerator.backward(loss)
    loop.step(loss)
loop.finish()
weights = sum(float(p.detach().double().sum()) for p in model.parameters())
print(f"result ranks {accelerator.num_processes} steps {loop.step_count} loss {loss.item():.3f} sent {loop.bytes_sent} weights {weights:.6f}")
