"""Registry of the benchmark data sets: one frozen record per set.

Paths are relative to the data home (see :func:`tripletml.datasets.get_data_home`)
and follow the layout of the project's shared data folder: large text files are
stored gzip'd (``vehicle/vehicle.scale.gz``), and the loaders accept either the
stored file or its uncompressed original (``vehicle/vehicle.scale``).
"""
from __future__ import annotations

from dataclasses import dataclass

__all__ = ["DataFile", "Subset", "DatasetRecord", "REGISTRY", "get_record", "KINDS"]

KINDS = ("libsvm", "uci_csv", "semeion", "uci_onehot", "csv_header", "idx", "dexter",
         "newsgroups", "arff_multilabel", "sklearn")

_LIBSVM = "https://www.csie.ntu.edu.tw/~cjlin/libsvmtools/datasets/multiclass/"
_UCI = "https://archive.ics.uci.edu/ml/machine-learning-databases/"
_MNIST = "https://yann.lecun.com/exdb/mnist/"
_MULAN = "https://raw.githubusercontent.com/tsoumakas/mulan/master/data/multi-label/"
# scikit-learn's copy of J. Rennie's 20news-bydate.tar.gz and the SHA-256 that
# scikit-learn checks it against (sklearn/datasets/_twenty_newsgroups.py, ARCHIVE).
_SKLEARN_20NG_URL = "https://ndownloader.figshare.com/files/5975967"
_SKLEARN_20NG_SHA256 = "8f1b2514ca22a5ade8fbb9cfa5727df95fa587f4c87b786e15c759fa66d95610"
_LIBSVM_CITE = ("C.-C. Chang and C.-J. Lin, LIBSVM: a library for support vector machines, "
                "ACM TIST 2(3):27, 2011; data page "
                "https://www.csie.ntu.edu.tw/~cjlin/libsvmtools/datasets/multiclass.html")
_UCI_CITE = "D. Dua and C. Graff, UCI Machine Learning Repository, http://archive.ics.uci.edu/ml"
_MULAN_CITE = ("G. Tsoumakas, E. Spyromitros-Xioufis, J. Vilcek and I. Vlahavas, MULAN: a Java "
               "library for multi-label learning, JMLR 12:2411-2414, 2011")


@dataclass(frozen=True)
class DataFile:
    """One file of a data set.

    Attributes
    ----------
    path : str
        Path of the stored file, relative to the data home (``"vehicle/vehicle.scale.gz"``).
    url : str or None
        Official download URL of the original file.
    sha256 : str or None
        SHA-256 of the stored file (what a mirror serves).
    sha256_original : str or None
        SHA-256 of the original file (what the official URL serves); ``None`` if
        unknown, in which case the official download is refused (fail closed).
    compressed : bool
        True when the stored file is ``gzip`` of the original, whose name is then
        :attr:`path` without ``.gz``.
    """

    path: str
    url: str | None
    sha256: str | None
    sha256_original: str | None
    compressed: bool = False

    @property
    def original_path(self) -> str:
        """Relative path of the uncompressed original (the official download)."""
        return self.path[:-3] if self.compressed else self.path


@dataclass(frozen=True)
class Subset:
    """A named part of a data set: the files that make it up and its size.

    ``n_classes`` is the number of classes present in this part when it is fewer
    than the record's (the red wines have no quality 9); ``None``: all of them.
    """

    name: str
    files: tuple[str, ...]
    n_samples: int
    n_classes: int | None = None


@dataclass(frozen=True)
class DatasetRecord:
    """Description of one data set.

    Attributes
    ----------
    name, description, origin : str
        Registry name, one-paragraph description, citation and provenance.
    kind : str
        Loader kind, one of ``KINDS``.
    files : tuple of DataFile
        Every file :func:`~tripletml.datasets.fetch` downloads (empty for ``"sklearn"``).
    shape : tuple of int
        ``(n_samples, n_features)`` of the ``"all"`` subset (``n_features`` is 0 for raw text).
    n_classes : int or None
        Number of classes (single-label sets).
    n_labels : int or None
        Number of labels (multi-label sets).
    subsets : tuple of Subset
        The available subsets; ``"all"`` is always one of them.
    classes : tuple of str
        Raw class labels as written in the files, in target order (``target`` is the
        index into this tuple); label names for multi-label sets.
    feature_names : tuple of str
        Names of the columns of ``data`` (empty when the set has none); for
        one-hot encoded categorical sets ``"attribute=value"``, which also lists
        the accepted values of each attribute.
    value_range : tuple of float, optional
        ``(low, high)`` every feature value must lie in; ``None``: any finite value.
    integer_values : bool
        Every feature value must be an integer (pixel gray levels, counts).
    """

    name: str
    description: str
    origin: str
    kind: str
    files: tuple[DataFile, ...]
    shape: tuple[int, int]
    n_classes: int | None
    n_labels: int | None
    subsets: tuple[Subset, ...]
    classes: tuple[str, ...] = ()
    feature_names: tuple[str, ...] = ()
    value_range: tuple[float, float] | None = None
    integer_values: bool = False

    @property
    def subset_names(self) -> tuple[str, ...]:
        return tuple(s.name for s in self.subsets)

    def subset(self, name: str) -> Subset:
        """Return the :class:`Subset` called ``name`` (ValueError if there is none)."""
        for s in self.subsets:
            if s.name == name:
                return s
        raise ValueError(f"data set {self.name!r} has no subset {name!r}; "
                         f"available: {', '.join(self.subset_names)}")

    def file(self, path: str) -> DataFile:
        """Return the :class:`DataFile` whose stored path is ``path``."""
        for f in self.files:
            if f.path == path:
                return f
        raise KeyError(path)


def _gz(path: str, url: str, sha_stored: str, sha_orig: str) -> DataFile:
    return DataFile(path, url, sha_stored, sha_orig, compressed=True)


def _plain(path: str, url: str, sha: str) -> DataFile:
    return DataFile(path, url, sha, sha, compressed=False)


def _ints(n: int, start: int = 1) -> tuple[str, ...]:
    return tuple(str(i) for i in range(start, start + n))


def _pixels(n: int) -> tuple[str, ...]:
    return tuple(f"pixel_{i}" for i in range(n))


#: UCI car.names: the six attributes and their values, in that file's order.
_CAR_ATTRIBUTES = (("buying", ("vhigh", "high", "med", "low")),
                   ("maint", ("vhigh", "high", "med", "low")),
                   ("doors", ("2", "3", "4", "5more")),
                   ("persons", ("2", "4", "more")),
                   ("lug_boot", ("small", "med", "big")),
                   ("safety", ("low", "med", "high")))
#: UCI winequality-*.csv header, less the last column ("quality", the target).
_WINE_FEATURES = ("fixed acidity", "volatile acidity", "citric acid", "residual sugar",
                  "chlorides", "free sulfur dioxide", "total sulfur dioxide", "density", "pH",
                  "sulphates", "alcohol")
_SEMEION = "semeion/semeion.data"
_CAR = "car/car.data"
_OPTDIGITS = "optdigits/optdigits.tra"
_MNIST_X, _MNIST_Y = "mnist-test/t10k-images-idx3-ubyte.gz", "mnist-test/t10k-labels-idx1-ubyte.gz"
_WINE_RED, _WINE_WHITE = "wine-quality/winequality-red.csv", "wine-quality/winequality-white.csv"


_RECORDS = [
    DatasetRecord(
        name="vehicle",
        description=("Statlog Vehicle Silhouettes, LIBSVM 'vehicle.scale' (features scaled to "
                     "[-1, 1]). Labels 1-4 with 212/217/218/199 samples; by their counts they "
                     "are opel/saab/bus/van of the Statlog data."),
        origin=f"Siebert 1987 (Turing Institute), Statlog/UCI; {_LIBSVM_CITE}",
        kind="libsvm",
        files=(_gz("vehicle/vehicle.scale.gz", _LIBSVM + "vehicle.scale",
                   "48a44f99248a96fb118103380ae7adf637a14b592b6fea64d5d58d562dd29dfe",
                   "f5bcfc5545c0f674b372e8dc3e41752efa287d4e04cb920150c51cd9c3df7b86"),),
        shape=(846, 18), n_classes=4, n_labels=None,
        subsets=(Subset("all", ("vehicle/vehicle.scale.gz",), 846),),
        classes=_ints(4),
    ),
    DatasetRecord(
        name="vowel",
        description=("Deterding vowel recognition, LIBSVM 'vowel.scale' (train, 528) and "
                     "'vowel.scale.t' (test, 462); labels 0-10, 90 samples each in 'all'."),
        origin=f"Deterding 1989 / Robinson, UCI; {_LIBSVM_CITE}",
        kind="libsvm",
        files=(_gz("vowel/vowel.scale.gz", _LIBSVM + "vowel.scale",
                   "3959bb7333781d3a6e14ea7da6bcfd7168cdf9d0c8fd35f208aefe4511cf7cd9",
                   "89ecbd4590cabc23b001cbd2d90128efe3c8ad02540ce1a08ef367b98d765585"),
               _gz("vowel/vowel.scale.t.gz", _LIBSVM + "vowel.scale.t",
                   "db3d44b378523296c61187e5cda4ba7520d68f846dbe93ba2d1677e83ba0cbc6",
                   "b96670a92b4d4d711db91ecc6c89bf7d75347a1ef1f196f5876575f1c5f9a240")),
        shape=(990, 10), n_classes=11, n_labels=None,
        subsets=(Subset("train", ("vowel/vowel.scale.gz",), 528),
                 Subset("test", ("vowel/vowel.scale.t.gz",), 462),
                 Subset("all", ("vowel/vowel.scale.gz", "vowel/vowel.scale.t.gz"), 990)),
        classes=_ints(11, start=0),
    ),
    DatasetRecord(
        name="segment",
        description="Statlog Image Segmentation, LIBSVM 'segment.scale'; 7 classes of 330.",
        origin=f"Vision Group, U. Massachusetts, Statlog/UCI; {_LIBSVM_CITE}",
        kind="libsvm",
        files=(_gz("segment/segment.scale.gz", _LIBSVM + "segment.scale",
                   "63544356a154f42ab988bf9ab63937cd0a85f46f0bb229ecc2584be5fbf08369",
                   "7c25c4529b8c84d047bc546e1e1f9a3f671c36d77f5469fb845b6e4a15bdd629"),),
        shape=(2310, 19), n_classes=7, n_labels=None,
        subsets=(Subset("all", ("segment/segment.scale.gz",), 2310),),
        classes=_ints(7),
    ),
    DatasetRecord(
        name="svmguide4",
        description="LIBSVM 'svmguide4' (train 300) and 'svmguide4.t' (test 312); labels -3..3 without 0.",
        origin=("C.-W. Hsu, C.-C. Chang and C.-J. Lin, A practical guide to support vector "
                f"classification [CWH03a]; {_LIBSVM_CITE}"),
        kind="libsvm",
        files=(_gz("svmguide4/svmguide4.gz", _LIBSVM + "svmguide4",
                   "4389497cf62f4b09c7687a9554df085bc17363eb87d96e7e737930491854b019",
                   "7dc2209e8453447c39b58ffc8c1f0ce1aaa8b29caa13c6871eb4a6ec3838212f"),
               _gz("svmguide4/svmguide4.t.gz", _LIBSVM + "svmguide4.t",
                   "ffa52cd2d9acb15c16df53f909ec932c25e20f313319c00f6617f42e45b9fd01",
                   "f5a5839d955f3eb6e379f5b226869b79bf8245bcda891649105858e4cdc61695")),
        shape=(612, 10), n_classes=6, n_labels=None,
        subsets=(Subset("train", ("svmguide4/svmguide4.gz",), 300),
                 Subset("test", ("svmguide4/svmguide4.t.gz",), 312),
                 Subset("all", ("svmguide4/svmguide4.gz", "svmguide4/svmguide4.t.gz"), 612)),
        classes=("-3", "-2", "-1", "1", "2", "3"),
    ),
    DatasetRecord(
        name="letter",
        description=("Letter recognition, LIBSVM 'letter.scale' (15000 = 10500 'letter.scale.tr' "
                     "+ 4500 validation rows) and 'letter.scale.t' (5000); labels 1-26. Subsets: "
                     "train = letter.scale.tr, test = letter.scale.t, all = letter.scale + "
                     "letter.scale.t."),
        origin=f"Frey and Slate 1991, UCI; tr/val split of Hsu and Lin 2002 [CWH01a]; {_LIBSVM_CITE}",
        kind="libsvm",
        files=(_gz("letter/letter.scale.gz", _LIBSVM + "letter.scale",
                   "5c7f029f2749f1bec46349370b9de1099cf83061ea2a58a76986ad17004e8d93",
                   "ce2c7df15cc5742dc4382d59079181c97c21e0beaa0af53c84cc5745c69f1020"),
               _gz("letter/letter.scale.t.gz", _LIBSVM + "letter.scale.t",
                   "9bbf7a2277f99e2090a4e965c7d1f148c936999564968848101d35d415e12428",
                   "07522ccbf54187fae6d560d1712b88c41ea1f7e8d19491c5adcc22ee37a075da"),
               _gz("letter/letter.scale.tr.gz", _LIBSVM + "letter.scale.tr",
                   "390d1ef7a90eeb4c9468c7cbfcdef85562537732ddb67178b173cca296ab6112",
                   "701e46fa614770d41849b5df32268515df49559463887d50f00d6e1aeeaee7b9")),
        shape=(20000, 16), n_classes=26, n_labels=None,
        subsets=(Subset("train", ("letter/letter.scale.tr.gz",), 10500),
                 Subset("test", ("letter/letter.scale.t.gz",), 5000),
                 Subset("all", ("letter/letter.scale.gz", "letter/letter.scale.t.gz"), 20000)),
        classes=_ints(26),
    ),
    DatasetRecord(
        name="balance-scale",
        description=("UCI Balance Scale: 625 rows (all 5^4 weight/distance combinations), 4 "
                     "integer features; class L/B/R in column 0 (288/49/288)."),
        origin=f"Siegler 1976; {_UCI_CITE}",
        kind="uci_csv",
        files=(_plain("balance-scale/balance-scale.data", _UCI + "balance-scale/balance-scale.data",
                      "5611187ef7345d807aa8ae22615945ade52a190537c0b1434bd44c3e877c5bb4"),),
        shape=(625, 4), n_classes=3, n_labels=None,
        subsets=(Subset("all", ("balance-scale/balance-scale.data",), 625),),
        classes=("B", "L", "R"),
    ),
    DatasetRecord(
        name="ionosphere",
        description="UCI Ionosphere: 351 radar returns, 34 features, class g/b in the last column.",
        origin=f"Sigillito et al. 1989, Johns Hopkins APL; {_UCI_CITE}",
        kind="uci_csv",
        files=(_gz("ionosphere/ionosphere.data.gz", _UCI + "ionosphere/ionosphere.data",
                   "3469748d4997e5a9f5144e56eb05516342ec095aa2682db935e957b29e8e4665",
                   "46d52186b84e20be52918adb93e8fb9926b34795ff7504c24350ae0616a04bbd"),),
        shape=(351, 34), n_classes=2, n_labels=None,
        subsets=(Subset("all", ("ionosphere/ionosphere.data.gz",), 351),),
        classes=("b", "g"),
    ),
    DatasetRecord(
        name="semeion",
        description=("UCI Semeion Handwritten Digit: 1593 scanned digits of about 80 writers, "
                     "16x16 binary pixels (256 features, 0/1; written 0.0000/1.0000, "
                     "space-separated, CRLF line ends) followed by 10 one-hot label columns; "
                     "target = the digit 0-9 (the position of the 1)."),
        origin=("Semeion Research Center of Sciences of Communication, Rome, and Tactile Srl, "
                "Brescia; M. Buscema, MetaNet: the theory of independent judges, Substance Use "
                f"& Misuse 33(2):439-461, 1998; {_UCI_CITE}"),
        kind="semeion",
        files=(_plain(_SEMEION, _UCI + "semeion/semeion.data",
                      "f43228ae3da5ea6a3c95069d53450b86166770e3b719dcc333182128fe08d4b1"),),
        shape=(1593, 256), n_classes=10, n_labels=None,
        subsets=(Subset("all", (_SEMEION,), 1593),),
        classes=_ints(10, start=0), feature_names=_pixels(256),
        value_range=(0.0, 1.0), integer_values=True,
    ),
    DatasetRecord(
        name="car",
        description=("UCI Car Evaluation: 1728 cars (every combination of six categorical "
                     "attributes), one-hot encoded into 21 columns of 0/1 named "
                     "'attribute=value' (each row sums to 6); class unacc/acc/good/vgood "
                     "(1210/384/69/65), target = index into the sorted class names."),
        origin=("M. Bohanec and V. Rajkovic, Knowledge acquisition and explanation for "
                "multi-attribute decision making, 8th Int. Workshop on Expert Systems and their "
                "Applications, Avignon, 1988; B. Zupan, M. Bohanec, I. Bratko and J. Demsar, "
                f"Machine learning by function decomposition, ICML 1997; {_UCI_CITE}"),
        kind="uci_onehot",
        files=(_plain(_CAR, _UCI + "car/car.data",
                      "b703a9ac69f11e64ce8c223c0a40de4d2e9d769f7fb20be5f8f2e8a619893d83"),),
        shape=(1728, 21), n_classes=4, n_labels=None,
        subsets=(Subset("all", (_CAR,), 1728),),
        classes=("acc", "good", "unacc", "vgood"),
        feature_names=tuple(f"{a}={v}" for a, values in _CAR_ATTRIBUTES for v in values),
    ),
    DatasetRecord(
        name="optdigits",
        description=("UCI Optical Recognition of Handwritten Digits, training file "
                     "'optdigits.tra': 3823 digits of 30 writers, 64 integer counts 0-16 "
                     "(set pixels in the 4x4 blocks of a 32x32 bitmap), digit 0-9 in the last "
                     "column. Its test file is scikit-learn's 'digits' (different writers)."),
        origin=("E. Alpaydin and C. Kaynak, Cascading classifiers, Kybernetika 34(4):369-374, "
                f"1998; C. Kaynak, MSc thesis, Bogazici University, 1995; {_UCI_CITE}"),
        kind="uci_csv",
        files=(_plain(_OPTDIGITS, _UCI + "optdigits/optdigits.tra",
                      "e1b683cc211604fe8fd8c4417e6a69f31380e0c61d4af22e93cc21e9257ffedd"),),
        shape=(3823, 64), n_classes=10, n_labels=None,
        subsets=(Subset("all", (_OPTDIGITS,), 3823),),
        classes=_ints(10, start=0), feature_names=_pixels(64),
        value_range=(0.0, 16.0), integer_values=True,
    ),
    DatasetRecord(
        name="mnist-test",
        description=("MNIST test set (10000 digits, 28x28 gray levels 0-255 as 784 float64 "
                     "features, target = the digit 0-9), read from the published gzipped IDX "
                     "files (stored as published; uncompressed sha256 0fa7898d... images, "
                     "ff7bcfd4... labels). The training files are not registered."),
        origin=("Y. LeCun, L. Bottou, Y. Bengio and P. Haffner, Gradient-based learning applied "
                "to document recognition, Proc. IEEE 86(11):2278-2324, 1998; "
                "http://yann.lecun.com/exdb/mnist/"),
        kind="idx",
        files=(_plain(_MNIST_X, _MNIST + "t10k-images-idx3-ubyte.gz",
                      "8d422c7b0a1c1c79245a5bcf07fe86e33eeafee792b84584aec276f5a2dbc4e6"),
               _plain(_MNIST_Y, _MNIST + "t10k-labels-idx1-ubyte.gz",
                      "f7ae60f92e00ec6debd23a6088c31dbd2371eca3ffa0defaefb259924204aec6")),
        shape=(10000, 784), n_classes=10, n_labels=None,
        subsets=(Subset("all", (_MNIST_X, _MNIST_Y), 10000),),
        classes=_ints(10, start=0), feature_names=_pixels(784),
        value_range=(0.0, 255.0), integer_values=True,
    ),
    DatasetRecord(
        name="wine-quality",
        description=("UCI Wine Quality (vinho verde): 11 physico-chemical measurements "
                     "(mixed units and scales; feature names from the header line) and the "
                     "sensory quality score. Subsets red (1599, qualities 3-8), white (4898, "
                     "3-9) and all (red then white, 6497; no column tells the color). "
                     "target = quality - 3, the index into classes '3'..'9'. Not the 178-row "
                     "UCI 'wine' of scikit-learn."),
        origin=("P. Cortez, A. Cerdeira, F. Almeida, T. Matos and J. Reis, Modeling wine "
                "preferences by data mining from physicochemical properties, Decision Support "
                f"Systems 47(4):547-553, 2009; {_UCI_CITE}"),
        kind="csv_header",
        files=(_plain(_WINE_RED, _UCI + "wine-quality/winequality-red.csv",
                      "4a402cf041b025d4566d954c3b9ba8635a3a8a01e039005d97d6a710278cf05e"),
               _plain(_WINE_WHITE, _UCI + "wine-quality/winequality-white.csv",
                      "76c3f809815c17c07212622f776311faeb31e87610d52c26d87d6e361b169836")),
        shape=(6497, 11), n_classes=7, n_labels=None,
        subsets=(Subset("red", (_WINE_RED,), 1599, n_classes=6),
                 Subset("white", (_WINE_WHITE,), 4898),
                 Subset("all", (_WINE_RED, _WINE_WHITE), 6497)),
        classes=_ints(7, start=3), feature_names=_WINE_FEATURES,
    ),
    DatasetRecord(
        name="dexter",
        description=("DEXTER (NIPS 2003 feature selection challenge, Reuters text): 20000 "
                     "sparse integer features, labels -1/+1; train 300 + valid 300 (the "
                     "challenge's test labels were never published)."),
        origin=("I. Guyon, S. Gunn, A. Ben-Hur and G. Dror, Result analysis of the NIPS 2003 "
                f"feature selection challenge, NIPS 2004; {_UCI_CITE}"),
        kind="dexter",
        files=(_gz("dexter/dexter_train.data.gz", _UCI + "dexter/DEXTER/dexter_train.data",
                   "806b71d80e56d806be2eab557d8f275a388cb239b2a17578b34545ca775c19cb",
                   "19f6a64c41bedd198f61b919f8b8bca98ee1173ca60db45f3aa980f1294d1fd0"),
               _plain("dexter/dexter_train.labels", _UCI + "dexter/DEXTER/dexter_train.labels",
                      "903477b77d8a81cc56828bb25626cd05a7fc95e3b67b6358faeee7cbdd85dbbc"),
               _gz("dexter/dexter_valid.data.gz", _UCI + "dexter/DEXTER/dexter_valid.data",
                   "014edab1c9784ace39024fc6cadc87fc99d4babcad23aea2cff0029bc3d105b6",
                   "5c105202f7e870130d168f04932ed8ba7be511e73723fd9895984344f600a7f9"),
               _plain("dexter/dexter_valid.labels", _UCI + "dexter/DEXTER/dexter_valid.labels",
                      "fe7c62dbf436183511b7d745dc356e91ccea33d1855913dd0185944da2a673c5"),
               _plain("dexter/dexter.param", _UCI + "dexter/DEXTER/dexter.param",
                      "3247ca724dc671ff789a889e0e7a7fb2572325b8f5db1781405f4b46b0d42016")),
        shape=(600, 20000), n_classes=2, n_labels=None,
        subsets=(Subset("train", ("dexter/dexter_train.data.gz", "dexter/dexter_train.labels"), 300),
                 Subset("valid", ("dexter/dexter_valid.data.gz", "dexter/dexter_valid.labels"), 300),
                 Subset("all", ("dexter/dexter_train.data.gz", "dexter/dexter_train.labels",
                                "dexter/dexter_valid.data.gz", "dexter/dexter_valid.labels"), 600)),
        classes=("-1", "1"),
    ),
    DatasetRecord(
        name="20newsgroups",
        description=("20 Newsgroups, J. Rennie's 'bydate' version: raw messages (headers "
                     "included), 11314 train + 7532 test, 20 groups. The shared folder's "
                     "archive is a repack whose messages are believed original (sha256 "
                     "a139fb51...); the official download is scikit-learn's https copy of "
                     "Rennie's tarball, checked against the sha256 scikit-learn publishes "
                     "(8f1b2514..., sklearn.datasets._twenty_newsgroups.ARCHIVE). Either "
                     "is accepted at the same path; nothing else is."),
        origin=("K. Lang, NewsWeeder: learning to filter netnews, ICML 1995; bydate split by "
                "J. Rennie, http://qwone.com/~jason/20Newsgroups/ (http only, no published "
                "checksum: not used for downloads); downloaded from scikit-learn's figshare "
                "copy https://ndownloader.figshare.com/files/5975967"),
        kind="newsgroups",
        files=(DataFile("20newsgroups/20news-bydate.tar.gz",
                        _SKLEARN_20NG_URL,
                        "a139fb51e75acedef330d0947c88a7cd32fcb6f8530456138b55441249ff60cc",
                        _SKLEARN_20NG_SHA256, compressed=False),),
        shape=(18846, 0), n_classes=20, n_labels=None,
        subsets=(Subset("train", ("20newsgroups/20news-bydate.tar.gz",), 11314),
                 Subset("test", ("20newsgroups/20news-bydate.tar.gz",), 7532),
                 Subset("all", ("20newsgroups/20news-bydate.tar.gz",), 18846)),
        classes=("alt.atheism", "comp.graphics", "comp.os.ms-windows.misc",
                 "comp.sys.ibm.pc.hardware", "comp.sys.mac.hardware", "comp.windows.x",
                 "misc.forsale", "rec.autos", "rec.motorcycles", "rec.sport.baseball",
                 "rec.sport.hockey", "sci.crypt", "sci.electronics", "sci.med", "sci.space",
                 "soc.religion.christian", "talk.politics.guns", "talk.politics.mideast",
                 "talk.politics.misc", "talk.religion.misc"),
    ),
    DatasetRecord(
        name="yeast",
        description=("Yeast gene functional classes (MULAN ARFF): 103 numeric features, 14 "
                     "labels Class1..Class14, train 1500 + test 917."),
        origin=("A. Elisseeff and J. Weston, A kernel method for multi-labeled classification, "
                f"NIPS 2001; {_MULAN_CITE}"),
        kind="arff_multilabel",
        files=(_plain("multilabel/yeast/yeast-train.arff", _MULAN + "yeast/yeast-train.arff",
                      "e759dc991ff54694a4ff9c4314f3be0d6fd2b1994a4b563f57e416394c6aebbd"),
               _plain("multilabel/yeast/yeast-test.arff", _MULAN + "yeast/yeast-test.arff",
                      "4aaac102bff9669a765bf0b378602e5cc8c3b181048282e2f003117b496d552a")),
        shape=(2417, 103), n_classes=None, n_labels=14,
        subsets=(Subset("train", ("multilabel/yeast/yeast-train.arff",), 1500),
                 Subset("test", ("multilabel/yeast/yeast-test.arff",), 917),
                 Subset("all", ("multilabel/yeast/yeast-train.arff",
                                "multilabel/yeast/yeast-test.arff"), 2417)),
        classes=tuple(f"Class{i}" for i in range(1, 15)),
    ),
    DatasetRecord(
        name="scene",
        description=("Scene classification (MULAN ARFF): 294 features in [0, 1], 6 labels, "
                     "train 1211 + test 1196."),
        origin=("M. R. Boutell, J. Luo, X. Shen and C. M. Brown, Learning multi-label scene "
                f"classification, Pattern Recognition 37(9), 2004; {_MULAN_CITE}"),
        kind="arff_multilabel",
        files=(_plain("multilabel/scene/scene-train.arff", _MULAN + "scene/scene-train.arff",
                      "b53ba93bdf412de922e3960389bcee24744fa3e872ce610511fc1d750888b64d"),
               _plain("multilabel/scene/scene-test.arff", _MULAN + "scene/scene-test.arff",
                      "ea38d20296b3ff7e220f477a3b802a9bcb2d768881fe6ee163efbc97ea527a42")),
        shape=(2407, 294), n_classes=None, n_labels=6,
        subsets=(Subset("train", ("multilabel/scene/scene-train.arff",), 1211),
                 Subset("test", ("multilabel/scene/scene-test.arff",), 1196),
                 Subset("all", ("multilabel/scene/scene-train.arff",
                                "multilabel/scene/scene-test.arff"), 2407)),
        classes=("Beach", "Sunset", "FallFoliage", "Field", "Mountain", "Urban"),
    ),
    DatasetRecord(
        name="iris", description="Fisher's Iris, bundled with scikit-learn.",
        origin="R. A. Fisher 1936; sklearn.datasets.load_iris", kind="sklearn", files=(),
        shape=(150, 4), n_classes=3, n_labels=None, subsets=(Subset("all", (), 150),),
        classes=("setosa", "versicolor", "virginica"),
    ),
    DatasetRecord(
        name="wine", description="UCI Wine recognition, bundled with scikit-learn.",
        origin="Forina et al.; UCI; sklearn.datasets.load_wine", kind="sklearn", files=(),
        shape=(178, 13), n_classes=3, n_labels=None, subsets=(Subset("all", (), 178),),
        classes=("class_0", "class_1", "class_2"),
    ),
    DatasetRecord(
        name="digits", description="UCI optical digits 8x8 (1797 images), bundled with scikit-learn.",
        origin="Alpaydin and Kaynak 1998; UCI; sklearn.datasets.load_digits", kind="sklearn",
        files=(), shape=(1797, 64), n_classes=10, n_labels=None,
        subsets=(Subset("all", (), 1797),), classes=_ints(10, start=0),
    ),
]

#: name -> record; tests may replace entries (e.g. with ``monkeypatch.setitem``).
REGISTRY: dict[str, DatasetRecord] = {r.name: r for r in _RECORDS}


def get_record(name: str) -> DatasetRecord:
    """Return the record of ``name``; ValueError listing the known names otherwise."""
    try:
        return REGISTRY[name]
    except (KeyError, TypeError):
        raise ValueError(f"unknown data set {name!r}; known data sets: "
                         f"{', '.join(sorted(REGISTRY))}") from None
