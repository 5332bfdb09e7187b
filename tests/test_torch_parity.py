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


@pytest.mark.parametrize("opt_name", ["adam", "adamw"])
def test_batchnorm_residual_gap_match_pytorch_in_both_modes_and_three_steps(opt_name):
    from test_modern import _bn_net

    from numbacnn.bench import torch_twin

    rng = np.random.default_rng(3)
    net = _bn_net(seed=2)
    tnet = torch_twin(net)
    x = rng.standard_normal((6, 2, 7, 5)).astype(np.float32)  # odd sizes
    x[:, :, 0, :] = x[:, :, 1, :]  # ties
    y = rng.integers(0, 3, 6)
    kw = {"lr": 1e-2, "weight_decay": 1e-2}
    opt = nc.make_optimizer(opt_name, net, **kw)
    # parameters without a gradient by construction (conv biases before BatchNorm, the bias of a
    # BatchNorm that only shifts what a later BatchNorm removes) have rounding noise for one, which
    # Adam would normalise into steps of +-lr in random directions: zeroed on both sides
    flat: set[str] = set()
    topt = {"adam": torch.optim.Adam, "adamw": torch.optim.AdamW}[opt_name](tnet.parameters(), **kw)
    for step in range(3):
        logits = net.forward(x, training=True)
        loss, d = nc.softmax_cross_entropy(logits, y, label_smoothing=0.1)
        dx = net.backward(d)
        xt = torch.from_numpy(x).requires_grad_(True)
        tnet.train()
        topt.zero_grad()
        tout = tnet(xt)
        tloss = torch.nn.functional.cross_entropy(tout, torch.from_numpy(y), label_smoothing=0.1)
        tloss.backward()
        rtol, atol = (1e-4, 1e-5) if step == 0 else (1e-3, 1e-4)
        np.testing.assert_allclose(logits, tout.detach().numpy(), rtol=rtol, atol=atol)
        assert loss == pytest.approx(tloss.item(), rel=1e-4)
        np.testing.assert_allclose(dx, xt.grad.numpy(), rtol=rtol, atol=atol)
        tgrads = dict(tnet.named_parameters())
        for k, g in net.grad_dict().items():
            np.testing.assert_allclose(g, tgrads[k].grad.numpy(), rtol=rtol, atol=atol, err_msg=k)
            if step == 0 and np.abs(tgrads[k].grad.numpy()).max() < 1e-6:
                flat.add(k)
            if k in flat:
                net._views(net.grads)[k][...] = 0.0
                tgrads[k].grad.zero_()
        opt.step()
        topt.step()
    assert flat == {"0.bias", "3.body.0.bias", "5.shortcut.0.bias", "5.shortcut.1.bias", "7.bias"}
    tstate = tnet.state_dict()
    for k, v in net.state_dict().items():  # weights, running statistics, num_batches_tracked
        np.testing.assert_allclose(v, tstate[k].numpy().reshape(v.shape), rtol=1e-3, atol=1e-4,
                                   err_msg=k)
    tnet.eval()
    with torch.no_grad():
        np.testing.assert_allclose(net.forward(x), tnet(torch.from_numpy(x)).numpy(), rtol=1e-3,
                                   atol=1e-4)


def test_batchnorm2d_at_batch_one_and_batchnorm1d_error_match_pytorch():
    rng = np.random.default_rng(0)
    bn = nc.BatchNorm2D(3).initialize(0)
    x = rng.standard_normal((1, 3, 4, 5)).astype(np.float32)
    tbn = torch.nn.BatchNorm2d(3)
    np.testing.assert_allclose(bn.forward(x, training=True), tbn(torch.from_numpy(x)).detach().numpy(),
                               rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(bn.running_var, tbn.running_var.numpy(), rtol=1e-5)
    with pytest.raises(ValueError, match="more than 1 value per channel"):
        torch.nn.BatchNorm1d(3)(torch.zeros(1, 3))
    with pytest.raises(ValueError, match="more than 1 value per channel"):
        nc.BatchNorm1D(3).initialize(0).forward(np.zeros((1, 3), np.float32), training=True)


def test_onecycle_follows_torch_onecyclelr_with_adam_betas():
    from numbacnn.training import onecycle

    p = torch.nn.Parameter(torch.zeros(1))
    opt = torch.optim.Adam([p], lr=4e-3)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=4e-3, total_steps=57)
    for k in range(57):
        lr, beta1 = onecycle(k, 57, 4e-3)
        assert lr == pytest.approx(opt.param_groups[0]["lr"], rel=1e-12)
        assert beta1 == pytest.approx(opt.param_groups[0]["betas"][0], rel=1e-12)
        opt.step()
        sched.step()
