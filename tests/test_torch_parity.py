"""Optional: identical weights give PyTorch's gradients and training trajectory (skipped without torch)."""
import numpy as np
import pytest

import numbacnn as nc

torch = pytest.importorskip("torch")


def test_matches_pytorch_gradients_and_steps():
    rng = np.random.default_rng(0)
    net = nc.Sequential([nc.Conv2D(1, 4, 3, padding="same"), nc.ReLU(), nc.MaxPool2D(3, stride=2),
                         nc.Conv2D(4, 6, 3, stride=2, padding=1), nc.Tanh(), nc.Flatten(),
                         nc.Dense(6 * 4 * 4, 10)], seed=0)
    tnet = torch.nn.Sequential(torch.nn.Conv2d(1, 4, 3, padding="same"), torch.nn.ReLU(),
                               torch.nn.MaxPool2d(3, stride=2), torch.nn.Conv2d(4, 6, 3, 2, 1),
                               torch.nn.Tanh(), torch.nn.Flatten(), torch.nn.Linear(96, 10))
    tnet.load_state_dict({k: torch.from_numpy(v) for k, v in net.state_dict().items()})
    x = rng.random((20, 1, 15, 15)).astype(np.float32)
    y = rng.integers(0, 10, 20)
    opt = nc.Adam(net, lr=1e-2, weight_decay=1e-3)
    topt = torch.optim.Adam(tnet.parameters(), lr=1e-2, weight_decay=1e-3)
    for step in range(5):
        loss, d = nc.softmax_cross_entropy(net.forward(x, training=True), y)
        dx = net.backward(d)
        xt = torch.from_numpy(x).requires_grad_(True)
        topt.zero_grad()
        tloss = torch.nn.functional.cross_entropy(tnet(xt), torch.from_numpy(y))
        tloss.backward()
        assert loss == pytest.approx(tloss.item(), rel=1e-5)
        np.testing.assert_allclose(dx, xt.grad.numpy(), rtol=1e-4, atol=1e-7)
        # identical weights at step 0: tight; later steps follow two float32 trajectories that
        # drift apart by rounding (an Adam step amplifies tiny differences), so allow more
        rtol, atol = (1e-4, 1e-6) if step == 0 else (1e-3, 1e-5)
        for (k, g), (_, p) in zip(net.grad_dict().items(), tnet.named_parameters()):
            np.testing.assert_allclose(g, p.grad.numpy(), rtol=rtol, atol=atol, err_msg=k)
        opt.step()
        topt.step()
    for k, v in net.state_dict().items():
        np.testing.assert_allclose(v, tnet.state_dict()[k].numpy(), rtol=1e-4, atol=1e-5, err_msg=k)
