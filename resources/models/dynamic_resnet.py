# Dynamic-branch ResNet: the ResNet-152 layout (bottleneck blocks, 3-8-36-3 per stage) whose
# residual blocks run only when a data-dependent gate opens.
#
# Symtune compiles these methods at run time as TorchScript (torch::jit::Module::define); the engine
# builds the module tree and the parameters (engine/src/zoo/dynamic_resnet.cpp), so this file holds
# only the forward computation of each class. Every method is valid Python as well as TorchScript.
#
# Module tree: stem (ConvBn), layer1..layer4 (Stage), each a chain of blocks "0", "1", ...: block 0
# is a DownBlock (projection shortcut, may change the resolution), the others are GatedBlocks.
# Parameters per class are listed above it. Submodules are called through `.forward(...)`: the
# C++ frontend (Module::define) resolves methods of a submodule but not `__call__`.


# weight [out, in, k, k]; bn_weight, bn_bias [out]; buffers running_mean, running_var [out];
# attributes stride, padding (int), training (bool).
class ConvBn(torch.nn.Module):
    def forward(self, x: Tensor) -> Tensor:
        y = torch.conv2d(x, self.weight, None, [self.stride, self.stride],
                         [self.padding, self.padding])
        return torch.batch_norm(y, self.bn_weight, self.bn_bias, self.running_mean,
                                self.running_var, self.training, 0.1, 1e-5, True)


# conv1 (1x1), conv2 (3x3, carries the stage's stride), conv3 (1x1, 4x the width): ConvBn.
class Bottleneck(torch.nn.Module):
    def forward(self, x: Tensor) -> Tensor:
        y = torch.relu(self.conv1.forward(x))
        y = torch.relu(self.conv2.forward(y))
        return self.conv3.forward(y)


# body: Bottleneck; down: ConvBn (1x1 projection with the stage's stride).
class DownBlock(torch.nn.Module):
    def forward(self, x: Tensor) -> Tensor:
        return torch.relu(self.body.forward(x) + self.down.forward(x))


# body: Bottleneck; gate_w [channels], gate_b [1].
# The gate reads the batch's mean activation per channel: when it is open (> 0.5) the residual
# branch runs, scaled by the gate so the gate itself is trained; when closed the block is the
# identity and costs nothing. Which blocks run is therefore the data's, but through the batch's
# mean, which moves little between batches: the pattern follows training, not each batch (one
# pattern over 400 steps of the ci preset, three over 60 of the cpu preset), and a closed block,
# which gets no gradient, opens only when its input moves (docs/benchmarks.md, "The model zoo").
class GatedBlock(torch.nn.Module):
    def forward(self, x: Tensor) -> Tensor:
        g = torch.sigmoid((x.mean([0, 2, 3]) * self.gate_w).sum() + self.gate_b)
        if bool(g > 0.5):
            return torch.relu(x + g * self.body.forward(x))
        return x


# stem: ConvBn; layer1..layer4: Stage; fc_w [classes, features], fc_b [classes];
# attribute stem_pool (bool): 3x3/2 max pooling after the stem (ImageNet-sized inputs).
class DynamicResNet(torch.nn.Module):
    def forward(self, x: Tensor) -> Tensor:
        x = torch.relu(self.stem.forward(x))
        if self.stem_pool:
            x = torch.max_pool2d(x, [3, 3], [2, 2], [1, 1])
        x = self.layer1.forward(x)
        x = self.layer2.forward(x)
        x = self.layer3.forward(x)
        x = self.layer4.forward(x)
        x = x.mean([2, 3])
        return torch.addmm(self.fc_b, x, self.fc_w.t())
